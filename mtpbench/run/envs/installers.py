"""Installers a build's environment is made with, and what their failures mean.

uv where present (seconds instead of minutes), pip otherwise. uv does not read pip's configuration, so the
machine's (`python -m pip config list`: index, extra indexes, find-links, constraint files, certificate,
timeout, as pip merges its files and PIP_* variables) is read here and passed on to it; pip reads its own.
A failed install is told apart as a pin no index can satisfy (bad input) or a failure of the network, the
disk or the installer, from the installer's own words, and shortened to one line of them.

The Makefile makes the project's own venv through this file too (`main`, run as a script before anything
but pip and uv is installed there), so the project and its builds are installed the same way: the module
imports nothing but the standard library.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal


@dataclass(frozen=True)
class PipSettings:
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    constraint_files: tuple[str, ...] = ()
    no_index: bool = False
    cert: str | None = None
    timeout: str | None = None

    def uv_args(self) -> list[str]:
        args: list[str] = []
        if self.no_index:
            args.append("--no-index")
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        for place in self.find_links:
            args += ["--find-links", place]
        for c in self.constraint_files:
            args += ["--constraint", c]
        return args

    def uv_env(self) -> dict[str, str]:
        env = {}
        if self.cert:
            env["SSL_CERT_FILE"] = self.cert
        if self.timeout:
            env["UV_HTTP_TIMEOUT"] = self.timeout
        return env

    def described(self) -> dict[str, Any]:
        """For the stamp: where packages came from, with any user:password taken out of the URLs."""
        return {
            "index_url": _redact(self.index_url) if self.index_url else None,
            "extra_index_urls": [_redact(u) for u in self.extra_index_urls],
            "find_links": [_redact(u) for u in self.find_links],
            "constraint_files": list(self.constraint_files),
            "no_index": self.no_index,
        }


def _redact(url: str) -> str:
    return re.sub(r"(?<=://)[^/@]+@", "***@", url)


# pip's own order: a PIP_* variable beats the config files, an `[install]` section beats `[global]`.
_SCOPES = (":env:", "install", "global")


def parse_pip_config(text: str) -> PipSettings:
    """`pip config list` output (`scope.key='value'` lines, files already merged by pip) as settings."""
    found: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        m = re.match(r"^([^.=\s]+|:env:)\.([a-z0-9-]+)='(.*)'$", line.strip())
        if m:
            found.setdefault(m.group(2), {})[m.group(1)] = m.group(3)

    def get(key: str) -> str | None:
        scopes = found.get(key, {})
        return next((scopes[s] for s in _SCOPES if s in scopes), None)

    def many(key: str) -> tuple[str, ...]:
        value = get(key)
        return tuple(value.split()) if value else ()

    no_index = (get("no-index") or "").lower() in ("1", "true", "yes", "on")
    return PipSettings(
        index_url=get("index-url"),
        extra_index_urls=many("extra-index-url"),
        find_links=many("find-links"),
        constraint_files=many("constraint"),
        no_index=no_index,
        cert=get("cert"),
        # pip's option and PIP_DEFAULT_TIMEOUT's name (a file may also spell it without "default-", which is
        # not read: uv then keeps its own timeout).
        timeout=get("default-timeout"),
    )


def pip_settings(python: str | None = None) -> PipSettings:
    """The machine's pip configuration as pip itself merges it (files and PIP_* variables); none when pip
    is missing or says nothing."""
    try:
        done = subprocess.run(
            [python or sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return PipSettings()
    return parse_pip_config(done.stdout) if done.returncode == 0 else PipSettings()


# ---------------------------------------------------------------------------------------------------------
# Installers


@dataclass(frozen=True)
class Installer:
    """How environments are made: uv (`argv` is the uv command) or pip (the base's `venv` and the new
    environment's own pip). Tests give a fake uv command here."""

    kind: Literal["uv", "pip"]
    argv: tuple[str, ...] = ()
    settings: PipSettings = field(default_factory=PipSettings)

    def version(self, python: Path | None = None) -> str:
        """The installer's version line (pip's: the one in `python`, the environment it installed into)."""
        pip = [str(python or sys.executable), "-m", "pip", "--version"]
        cmd = [*self.argv, "--version"] if self.kind == "uv" else pip
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return self.kind
        return (done.stdout.strip().splitlines() or [self.kind])[0]

    def create(self, base: str, where: Path) -> list[str]:
        """Make a venv at `where` from the interpreter `base`."""
        if self.kind == "uv":
            return [*self.argv, "venv", "--quiet", "--python", base, str(where)]
        return [base, "-m", "venv", str(where)]

    def install(
        self, python: Path, requirements: Sequence[str], constraints: Path | None, hashed: Path | None = None
    ) -> list[str]:
        """The install command. `hashed`: the requirements written to a file with their `--hash=` options,
        installed in hash-checking mode instead of as arguments (both installers read hashes only there)."""
        extra = ["--constraint", str(constraints)] if constraints is not None else []
        if hashed is not None:
            extra += ["--require-hashes", "--requirement", str(hashed)]
            requirements = []
        if self.kind == "uv":
            # pip picks the best version over every index and find-links folder; uv's default takes the
            # first index that has the name, which would take a registry's CUDA torch over the machine's
            # +cpu wheel. unsafe-best-match is pip's rule.
            return [
                *self.argv,
                "pip",
                "install",
                "--python",
                str(python),
                "--index-strategy",
                "unsafe-best-match",
                # uv's default links files from its cache by hard link: an in-place edit in one environment
                # (a post_install patch script, a hand edit) then changed uv's cache and every environment of
                # the same pin (issue 34). A copy isolates them. Not `clone`: uv 0.13.9 falls back to a hard
                # link where the filesystem has no reflinks (ext4). pip extracts wheels, so it copies anyway.
                "--link-mode",
                "copy",
                # pip compiles every installed module to bytecode; uv does not unless asked. Without it an
                # environment has no .pyc, and where bytecode is not written at run time
                # (PYTHONDONTWRITEBYTECODE, a read-only environment) every fresh cell-repeat compiled vLLM's
                # ~6000 modules again: `from vllm import LLM` took 14.7 s instead of 6.7 s (measured).
                "--compile-bytecode",
                *self.settings.uv_args(),
                *extra,
                *requirements,
            ]
        return [str(python), "-m", "pip", "install", "--disable-pip-version-check", *extra, *requirements]

    def uninstall(self, python: Path, names: Sequence[str]) -> list[str]:
        if self.kind == "uv":
            return [*self.argv, "pip", "uninstall", "--python", str(python), *names]
        return [str(python), "-m", "pip", "uninstall", "-y", *names]

    def env(self) -> dict[str, str]:
        return {**os.environ, **(self.settings.uv_env() if self.kind == "uv" else {})}


def find_uv() -> str | None:
    """uv beside this interpreter (the `uv` wheel puts it in the venv's bin/), else on PATH."""
    here = Path(sys.executable).parent / "uv"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("uv")


def default_installer() -> Installer:
    """uv where present, pip otherwise, with the machine's pip configuration (passed on to uv)."""
    uv = find_uv()
    if uv is None:
        return Installer("pip")
    return Installer("uv", (uv,), pip_settings())


# ---------------------------------------------------------------------------------------------------------
# Failures: bad pin (2) or failed install (3)

# What an installer prints when the network or the disk failed: checked first, since pip ends a run whose
# downloads all failed with the same "Could not find a version" as for a pin that does not exist.
_INSTALL_FAILURE = re.compile(
    r"No space left on device|Disk quota exceeded|os error 28|Errno 28|"
    r"Failed to fetch|error sending request|dns error|Name or service not known|"
    r"Temporary failure in name resolution|Network is unreachable|Connection refused|"
    r"NewConnectionError|ConnectTimeout|ReadTimeout|timed out|ProxyError|SSLError|certificate verify failed",
    re.IGNORECASE,
)
_BAD_PIN = re.compile(
    r"No solution found when resolving|requirements are unsatisfiable|no version of|"
    r"not found in the (package )?registry|was not found in the|Could not find a version that satisfies|"
    r"No matching distribution found|ResolutionImpossible|conflicting dependencies|"
    r"is not a valid wheel filename|Invalid requirement",
    re.IGNORECASE,
)


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def _cut(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def failure_reason(output: str) -> str:
    """The installer's own reason, in one line: uv's first `Because …` clause (environment markers taken
    out), else its `error:` line with the last `cause:`; pip's first `ERROR:` line (without the list of
    every version the index has)."""
    lines = [ln.strip().lstrip("╰─▶×│ ").strip() for ln in output.splitlines() if ln.strip()]
    flat = re.sub(r"\{[^{}]*\}", "", " ".join(lines))
    m = re.search(r"Because (.*?)(?:, we can conclude|\.(?:\s|$)|$)", flat)
    if m:
        return _cut(m.group(0).removesuffix(", we can conclude").rstrip(". "))
    errors = [ln for ln in lines if ln.startswith(("ERROR:", "error:"))]
    causes = [ln.removeprefix("cause:").strip() for ln in lines if ln.startswith("cause:")]
    if errors:
        first = re.sub(r"\s*\(from versions:[^)]*\)", "", errors[0])
        return _cut(first + (f"; {causes[-1]}" if causes else ""))
    return _cut(last_line(output))


# Hash-checking mode's refusals (uv 0.13.9's and pip's words): the config's hashes do not fit what the index
# or file serves, or a requirement lacks one: the pins are to fix (exit 2), not the machine. Checked before the
# network's words, since uv tells a mismatch under a "Failed to read/download" line.
_BAD_HASH = re.compile(
    r"Hash mismatch for|all requirements must have a hash|THESE PACKAGES DO NOT MATCH THE HASHES|"
    r"Hashes are required in --require-hashes mode",
    re.IGNORECASE,
)


def classify_failure(output: str) -> Literal["bad-pin", "install-failed"]:
    if _BAD_HASH.search(output):
        return "bad-pin"
    if _INSTALL_FAILURE.search(output):
        return "install-failed"
    return "bad-pin" if _BAD_PIN.search(output) else "install-failed"


# ---------------------------------------------------------------------------------------------------------
# The project's own venv (the Makefile)


def main(argv: Sequence[str]) -> int:
    """`python -I mtpbench/run/envs/installers.py ARG...`: install ARGs (requirements and the installer's options,
    e.g. `-e .[cpu,plot]`) into this interpreter's environment with `default_installer()`, the command shown
    first. Run as a file with -I (no package import, no script folder on the path): the venv has no mtpbench
    dependencies yet, and this folder's bisect.py would stand for the standard library's."""
    installer = default_installer()
    if not argv:
        print("usage: python -I mtpbench/run/envs/installers.py REQUIREMENT-OR-OPTION...", file=sys.stderr)
        return 2
    command = installer.install(Path(sys.executable), list(argv), None)
    print(f"{installer.kind}: {shlex.join(command)}", file=sys.stderr, flush=True)
    return subprocess.run(command, env=installer.env(), check=False).returncode


__all__ = [
    "Installer",
    "PipSettings",
    "classify_failure",
    "default_installer",
    "failure_reason",
    "find_uv",
    "main",
    "parse_pip_config",
    "pip_settings",
]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
