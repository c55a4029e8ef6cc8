"""Builds that cannot contaminate each other (issue 34): uv installed by hard link from its cache, so an
in-place edit of an installed file in one build's `post_install` (a patch script doing `p.write_text(…)`)
changed every environment of the same pin and uv's own cache. These tests use the real uv (the `test`
extra's, beside this interpreter) on a tiny wheel built here, with a uv cache of their own: a second each.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path
from typing import Any

import pytest

from mtpbench.run import installers
from mtpbench.run import provision as prov
from mtpbench.specs import BuildSpec

CLEAN = "VALUE = 'clean'\n"
# The edit a patch script makes: the same file opened for writing, so the same inode.
EDIT = (
    "import pathlib, tinypkg; p = pathlib.Path(tinypkg.__file__); "
    "p.write_text(p.read_text().replace('clean', 'edited'))"
)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def tiny_wheel(folder: Path, files: dict[str, str] | None = None) -> Path:
    """A pure-Python wheel `tinypkg 1.0` with a RECORD, as a build backend writes it."""
    files = files or {"tinypkg/__init__.py": CLEAN, "tinypkg/other.py": "OTHER = 1\n"}
    info = "tinypkg-1.0.dist-info"
    content = {
        **{name: text.encode() for name, text in files.items()},
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: mtpbench-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in content.items())
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "tinypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in content.items():
            z.writestr(name, data)
        z.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    return wheel


@pytest.fixture
def real_uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> installers.Installer:
    """The real uv, offline: only the tiny wheel's folder, and a uv cache of the test's own."""
    uv = installers.find_uv()
    if uv is None:
        pytest.skip("uv is not installed (the test extra installs it)")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.delenv("UV_LINK_MODE", raising=False)
    settings = installers.PipSettings(find_links=(str(tiny_wheel(tmp_path / "wheels").parent),), no_index=True)
    return installers.Installer("uv", (uv,), settings)


def spec(**fields: Any) -> BuildSpec:
    return BuildSpec.model_validate({"requirements": ["tinypkg==1.0"], **fields})


def installed(done: prov.Provisioned) -> Path:
    (sp,) = (done.path / "lib").glob("python3*/site-packages")
    return sp / "tinypkg" / "__init__.py"


def test_an_in_place_edit_in_one_build_leaves_the_other_build_and_uvs_cache_clean(
    tmp_path: Path, real_uv: installers.Installer
) -> None:
    root = tmp_path / "builds"
    clean = prov.provision("clean", spec(), root=root, installer=real_uv)
    patched = prov.provision(
        "patched", spec(post_install=[{"run": ["{python}", "-c", EDIT]}]), root=root, installer=real_uv
    )
    assert installed(patched).read_text() == "VALUE = 'edited'\n"  # the edit happened where it was asked
    assert installed(clean).read_text() == CLEAN
    # uv's cache too: a build provisioned afterwards from it starts clean.
    later = prov.provision(
        "later", spec(post_install=[{"run": ["{python}", "-c", "pass"]}]), root=root, installer=real_uv
    )
    assert installed(later).read_text() == CLEAN
    # No installed file shares its inode with another environment or with uv's cache.
    links = {p.name: installed(p).stat().st_nlink for p in (clean, patched, later)}
    assert set(links.values()) == {1}, links
