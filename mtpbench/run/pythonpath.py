"""A worker's PYTHONPATH: a folder holding only the mtpbench package, then the user's own entries.

The folder is built on the machine the worker runs on, from the mtpbench that machine imported: the
runner's own package for a local worker, the copy Ray unpacked on a node (runtime_env `py_modules`) for a
Ray task. No path of the driver's (its source checkout, its per-user cache) has to exist on a node.
The runner and the executors both import this module; neither imports the other for it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import mtpbench
from mtpbench.weights import cache_dir


def package_path_dir() -> Path:
    """A folder whose only entry is this machine's mtpbench package, for a worker's PYTHONPATH.

    The package's parent folder is a source checkout after an editable install but site-packages itself
    after `pip install .`, and putting that on another build's path would let it import this
    environment's vllm. A cache folder keyed by the package's location holds one symlink to it.
    """
    pkg = Path(mtpbench.__file__).resolve().parent
    digest = hashlib.sha256(str(pkg).encode()).hexdigest()[:16]
    try:
        return _link_folder(cache_dir() / "pythonpath" / digest, pkg)
    except OSError:
        # An unwritable cache (read-only home in CI) must not stop a run: a private temp folder will do.
        return _link_folder(Path(tempfile.mkdtemp(prefix="mtpbench-path-")), pkg)


def _link_folder(folder: Path, pkg: Path) -> Path:
    link = folder / "mtpbench"
    if link.is_symlink() and link.resolve() == pkg:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    # Replace atomically: a concurrent runner may be reading the same link.
    tmp = folder / f".mtpbench.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(pkg, target_is_directory=True)
    os.replace(tmp, link)
    return folder


def worker_pythonpath(*user_paths: str) -> str:
    """mtpbench alone first, then the user's own entries (a build's env, then the inherited one) in order.

    Inherited entries are kept: on Ascend, CANN's set_env.sh puts Python packages on PYTHONPATH.
    """
    entries = [str(package_path_dir())]
    for raw in user_paths:
        for entry in raw.split(os.pathsep):
            if entry and entry not in entries:
                entries.append(entry)
    return os.pathsep.join(entries)


def user_pythonpath(pythonpath: str) -> str:
    """The user's entries of a PYTHONPATH made by `worker_pythonpath` here: what travels to a Ray node,
    which puts its own mtpbench folder in front (`worker_pythonpath` again, run there)."""
    ours = str(package_path_dir())
    return os.pathsep.join(p for p in pythonpath.split(os.pathsep) if p and p != ours)
