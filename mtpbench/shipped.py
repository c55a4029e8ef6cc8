"""Where the shipped configs, prompt sets and baselines are: in a source checkout and in an installed wheel.

The top-level `configs/`, `prompts/` and `baselines/` folders of the source tree are the source of truth.
A wheel carries copies of them as package data under `mtpbench/_shipped/` (pyproject.toml's force-include
maps the folders into the package), laid out like the source tree's root: `_shipped/mtpbench/` stands for the package
itself. So the relative paths inside the shipped configs (`../prompts/coding.yaml`,
`../mtpbench/fixtures/...`) mean the same files in both layouts; `rebase` maps them in the installed one.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
INSTALLED_ROOT = PACKAGE_DIR / "_shipped"
FOLDERS = ("configs", "prompts", "baselines")


def data_root() -> Path:
    """The folder holding configs/, prompts/ and baselines/: the wheel's copy, else the source tree."""
    if (INSTALLED_ROOT / "configs").is_dir():
        return INSTALLED_ROOT
    return PACKAGE_DIR.parent


def rebase(path: Path) -> Path:
    """A path under `<data root>/mtpbench/` is the package itself (only differs in an installed wheel)."""
    root = data_root()
    if root != INSTALLED_ROOT:
        return path
    try:
        rel = path.relative_to(root / PACKAGE_DIR.name)
    except ValueError:
        return path
    return PACKAGE_DIR / rel


def shipped_file(folder: str, name: str) -> Path | None:
    """`configs/<name>.yaml` (or prompts/, baselines/) as shipped, or None when there is no such file."""
    for candidate in (name, f"{name}.yaml"):
        p = data_root() / folder / candidate
        if p.is_file():
            return p
    return None


def shipped_names(folder: str) -> list[str]:
    d = data_root() / folder
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []
