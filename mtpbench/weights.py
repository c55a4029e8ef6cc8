"""Identity of a model's weights without rereading gigabytes: a digest of its weight files, cached.

A model folder's weights are its `*.safetensors` (or `*.bin`, `*.pt`, `*.pth`, `*.gguf`) files. Each
file's sha256 is cached in one JSON file under mtpbench's cache folder, keyed by the file's resolved
path, size and mtime (nanoseconds): a file that has not changed is not read again, a rewritten one is.
The model's digest is the sha256 of the sorted (relative name, file sha256) pairs, so the same weights
copied to another machine give the same digest. The cache folder is MTPBENCH_CACHE_DIR, else
$XDG_CACHE_HOME/mtpbench, else ~/.cache/mtpbench; an unwritable cache only costs a reread.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
CACHE_FILE = "weights-sha256.json"


def cache_dir() -> Path:
    """mtpbench's per-user cache folder (see the module docstring)."""
    explicit = os.environ.get("MTPBENCH_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "mtpbench"


def weight_files(folder: Path) -> list[Path]:
    """The weight files of a model folder (recursively, e.g. an `original/` subfolder), sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _load_cache(path: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_cache(path: Path, cache: dict[str, dict[str, object]]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=0, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a cache we cannot write costs a reread next time, nothing else


def weights_sha256(folder: str | Path, cache: Path | None = None) -> str | None:
    """Digest of the weight files of a local model folder; None when it has none (or is not a folder)."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    files = weight_files(folder)
    if not files:
        return None
    cache_path = cache if cache is not None else cache_dir() / CACHE_FILE
    entries = _load_cache(cache_path)
    changed = False
    pairs = []
    for f in files:
        st = f.stat()
        key = str(f.resolve())
        hit = entries.get(key)
        if hit and hit.get("size") == st.st_size and hit.get("mtime_ns") == st.st_mtime_ns:
            digest = str(hit["sha256"])
        else:
            digest = _file_sha256(f)
            entries[key] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
            changed = True
        pairs.append([f.relative_to(folder).as_posix(), digest])
    if changed:
        _save_cache(cache_path, entries)
    return hashlib.sha256(json.dumps(pairs, separators=(",", ":")).encode()).hexdigest()
