"""Malformed and hostile input, as one table through the real command line.

Every row builds an input under a temporary folder (a config, a prompt set, a run folder, a baseline, an
option value, an interpreter) and runs one `mtpbench` command on it. Each must end with its documented
exit code (2 bad input, 4 not comparable) and exactly ONE line on stderr that names the file and the key,
never a traceback, and must leave the folder exactly as it was (nothing half-written).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from mtpbench.cli import app
from mtpbench.config import MAX_PROMPT_CHARS, MAX_YAML_BYTES
from mtpbench.store.columnar import COPY
from tests.support.synthetic_runs import PUBLISHED, write_run

REPO = Path(__file__).resolve().parents[2]
GOOD = [98.2, 96.3, 89.9]
DELETE = object()

# --- input builders --------------------------------------------------------------------------------------


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        data = data.setdefault(key, {})
    if value is DELETE:
        del data[last]
    else:
        data[last] = value


def prompts_file(tmp: Path, **over: Any) -> Path:
    data: dict[str, Any] = {"name": "p", "prompts": [{"id": "a", "text": "def f():"}, {"id": "b", "text": "x = 1"}]}
    for k, v in over.items():
        _set(data, k, v)
    path = tmp / "prompts.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def config_file(tmp: Path, prompt_set: dict[str, Any] | None = None, **over: Any) -> Path:
    prompts_file(tmp, **(prompt_set or {}))
    data: dict[str, Any] = {
        "name": "hostile",
        "model": "org/target",
        "speculative": {"method": "mtp", "model": "org/drafter", "num_speculative_tokens": 3},
        "prompts": "prompts.yaml",
        "repeats": 2,
        "hash_seeds": [0, 1],
    }
    for k, v in over.items():
        _set(data, k.replace("__", "."), v)
    path = tmp / "cfg.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def cfg(**over: Any) -> Callable[[Path], list[str]]:
    """`run CFG --dry-run` on a valid config changed by `over` (dotted keys spelled with __)."""
    return lambda tmp: ["run", str(config_file(tmp, **over)), "--dry-run"]


def cfg_text(text: str | bytes) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        prompts_file(tmp)
        path = tmp / "cfg.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return ["run", str(path), "--dry-run"]

    return build


def prompts(**over: Any) -> Callable[[Path], list[str]]:
    return lambda tmp: ["run", str(config_file(tmp, prompt_set=over)), "--dry-run"]


def a_run(tmp: Path) -> Path:
    return write_run(tmp / "runs", {"cpu/eager/stock": [GOOD, GOOD]})


def manifest(change: Callable[[dict[str, Any]], Any], replace: bool = False) -> Callable[[Path], list[str]]:
    """`show RUN` after `change` edited the parsed manifest.json (or, with replace, returned a new one)."""

    def build(tmp: Path) -> list[str]:
        run = a_run(tmp)
        m = json.loads((run / "manifest.json").read_text())
        out = change(m)
        (run / "manifest.json").write_text(json.dumps(out if replace else m))
        return ["show", str(run)]

    return build


def manifest_bytes(data: bytes) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        run = a_run(tmp)
        (run / "manifest.json").write_bytes(data)
        return ["show", str(run)]

    return build


def record(
    change: Callable[[dict[str, Any]], Any], replace: bool = False, line: int = 2
) -> Callable[[Path], list[str]]:
    """`show RUN` after `change` edited record `line` (1-based; line 2 is the first prompt record), or with
    replace, returned the new line (a string as it is, anything else as JSON)."""

    def build(tmp: Path) -> list[str]:
        run = a_run(tmp)
        lines = (run / "records.jsonl").read_text().splitlines()
        rec = json.loads(lines[line - 1])
        out = change(rec)
        new = out if replace else rec
        lines[line - 1] = new if isinstance(new, str) else json.dumps(new)
        (run / "records.jsonl").write_text("\n".join(lines) + "\n")
        return ["show", str(run)]

    return build


def counts(**values: Any) -> Callable[[Path], list[str]]:
    return record(lambda r: r.update(values))


def baseline(change: Callable[[dict[str, Any]], Any], replace: bool = False) -> Callable[[Path], list[str]]:
    """`compare RUN --baseline B` with B the published baseline after `change` (or what it returned)."""

    def build(tmp: Path) -> list[str]:
        run = a_run(tmp)
        data = yaml.safe_load(PUBLISHED.read_text())
        out = change(data)
        (tmp / "b.yaml").write_text(yaml.safe_dump(out if replace else data))
        return ["compare", str(run), "--baseline", str(tmp / "b.yaml")]

    return build


def baseline_text(cut: Callable[[str], str]) -> Callable[[Path], list[str]]:
    """`compare RUN --baseline B` with B the published baseline's text as `cut` left it (a file cut off)."""

    def build(tmp: Path) -> list[str]:
        run = a_run(tmp)
        (tmp / "b.yaml").write_text(cut(PUBLISHED.read_text()))
        return ["compare", str(run), "--baseline", str(tmp / "b.yaml")]

    return build


def entry0(**values: Any) -> Callable[[Path], list[str]]:
    return baseline(lambda b: b["entries"][0].update(values))


def compare_with(
    *opts: str | Callable[[Path], str], baseline_path: Callable[[Path], Path] = lambda t: PUBLISHED
) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        run = a_run(tmp)
        extra = [o(tmp) if callable(o) else o for o in opts]
        return ["compare", str(run), "--baseline", str(baseline_path(tmp)), *extra]

    return build


def run_file(name: str, replace_with: str | None) -> Callable[[Path], list[str]]:
    """`show RUN` with one of its files deleted (None) or turned into a folder ("dir")."""

    def build(tmp: Path) -> list[str]:
        run = a_run(tmp)
        (run / name).unlink()
        if replace_with == "dir":
            (run / name).mkdir()
        return ["show", str(run)]

    return build


def interpreter(script: str) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        exe = tmp / "python"
        exe.write_text("#!/bin/sh\n" + script + "\n")
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
        return ["doctor", "--python", str(exe), "--no-engine"]

    return build


def bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _file(p: Path) -> Path:
    """A plain file where an output folder would go."""
    p.write_text("not a folder")
    return p


def mkdir(path_of: Callable[[Path], Path]) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        p = path_of(tmp)
        p.mkdir(parents=True, exist_ok=True)
        return p

    return make


# --- the table -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[Path], list[str]]
    needles: tuple[str, ...]
    code: int = 2


CASES = [
    # config: YAML itself
    Case("yaml-syntax", cfg_text("name: [unclosed\n"), ("cfg.yaml:2:", "malformed YAML")),
    Case("yaml-list-document", cfg_text("- a\n- b\n"), ("cfg.yaml", "expected a mapping", "got list")),
    Case("yaml-scalar-document", cfg_text("just words\n"), ("cfg.yaml", "expected a mapping", "got str")),
    Case("yaml-empty-file", cfg_text(""), ("cfg.yaml", "expected a mapping", "got an empty document")),
    Case("yaml-only-comments", cfg_text("# a config cut off\n# before its keys\n"), ("cfg.yaml", "empty document")),
    Case(
        "yaml-truncated",
        cfg_text("name: x\nmodel: m\nspeculative: {method: mtp, num_specul"),
        ("cfg.yaml:4:", "malformed YAML"),
    ),
    Case(
        "yaml-python-tag",
        cfg_text('name: x\nmodel: !!python/object/apply:os.system ["touch PWNED"]\n'),
        ("cfg.yaml:2:", "python/object/apply:os.system"),
    ),
    Case("yaml-alias-bomb", cfg_text(bomb()), ("cfg.yaml", "expands to more than")),
    Case("yaml-recursive-alias", cfg_text("name: &x [1, *x]\n"), ("cfg.yaml", "recursive alias")),
    Case("yaml-deep-nesting", cfg_text("name: " + "[" * 5000 + "]" * 5000 + "\n"), ("cfg.yaml",)),
    Case("invalid-utf8", cfg_text(b"name: caf\xe9\n"), ("cfg.yaml", "not UTF-8")),
    Case("config-too-large", cfg_text(b"#" * (MAX_YAML_BYTES + 1)), ("cfg.yaml", "larger than 8 MiB")),
    # config: files
    Case("config-missing", lambda tmp: ["run", str(tmp / "nope.yaml"), "--dry-run"], ("nope.yaml", "not found")),
    Case(
        "config-is-a-folder",
        lambda tmp: ["run", str(mkdir(lambda t: t / "c.yaml")(tmp)), "--dry-run"],
        ("c.yaml", "is a folder"),
    ),
    Case(
        "config-under-a-file",
        lambda tmp: ["run", str(prompts_file(tmp) / "cfg.yaml"), "--dry-run"],
        ("prompts.yaml/cfg.yaml", "Not a directory"),
    ),
    Case(
        "config-unknown-name",
        lambda tmp: ["run", "no-such-shipped-config", "--dry-run"],
        ("no-such-shipped-config", "not found"),
    ),
    # config: keys, types, ranges
    Case("unknown-key", cfg(colour="red"), ("cfg.yaml", "colour: unknown key")),
    Case("unknown-nested-key", cfg(speculative__draft="x"), ("cfg.yaml", "speculative.draft: unknown key")),
    Case("missing-model", cfg(model=DELETE), ("cfg.yaml", "model: Field required")),
    Case("repeats-string", cfg(repeats="three"), ("cfg.yaml", "repeats:")),
    Case("repeats-bool", cfg(repeats=True), ("cfg.yaml", "repeats:")),
    Case("repeats-zero", cfg(repeats=0, hash_seeds=DELETE), ("cfg.yaml", "repeats:", "greater than 0")),
    Case("repeats-negative", cfg(repeats=-1, hash_seeds=DELETE), ("cfg.yaml", "repeats:")),
    Case("k-zero", cfg(speculative__num_speculative_tokens=0), ("cfg.yaml", "speculative.num_speculative_tokens")),
    Case("k-fraction", cfg(speculative__num_speculative_tokens=2.5), ("cfg.yaml", "num_speculative_tokens")),
    Case("k-huge", cfg(speculative__num_speculative_tokens=10**30), ("cfg.yaml", "speculative.num_speculative_tokens")),
    Case("k-null", cfg(speculative__num_speculative_tokens=None), ("cfg.yaml", "speculative.num_speculative_tokens")),
    Case("k-list-duplicates", cfg(speculative__num_speculative_tokens=[1, 3, 3]), ("cfg.yaml", "duplicate k")),
    Case("k-list-empty", cfg(speculative__num_speculative_tokens=[]), ("cfg.yaml", "needs at least one k")),
    # config: speculative methods (issue 38): what vLLM would refuse minutes later, at engine start
    Case(
        "method-unknown",
        cfg(speculative__method="ngramm"),
        ("cfg.yaml", "speculative.method: 'ngramm' is not a method vLLM knows", "did you mean 'ngram'"),
    ),
    Case("method-upper-case", cfg(speculative__method="MTP"), ("cfg.yaml", "speculative.method", "did you mean 'mtp'")),
    Case(
        "draft-model-without-model",
        cfg(speculative__method="draft_model", speculative__model=DELETE),
        ("cfg.yaml", "speculative: model: method 'draft_model' drafts with its own model"),
    ),
    Case(
        "eagle3-without-model",
        cfg(speculative__method="eagle3", speculative__model=DELETE),
        ("cfg.yaml", "method 'eagle3' drafts with its own model"),
    ),
    Case(
        "lookup-min-above-max",
        cfg(
            speculative={
                "method": "ngram",
                "num_speculative_tokens": 3,
                "extra": {"prompt_lookup_min": 5, "prompt_lookup_max": 2},
            }
        ),
        ("cfg.yaml", "prompt_lookup_min 5 is larger than prompt_lookup_max 2"),
    ),
    Case(
        "lookup-zero",
        cfg(speculative={"method": "ngram", "num_speculative_tokens": 3, "extra": {"prompt_lookup_min": 0}}),
        ("cfg.yaml", "extra.prompt_lookup_min: expected an integer in 1..65536, got 0"),
    ),
    Case(
        "lookup-string",
        cfg(speculative={"method": "ngram", "num_speculative_tokens": 3, "extra": {"prompt_lookup_max": "5"}}),
        ("cfg.yaml", "extra.prompt_lookup_max", "got '5'"),
    ),
    Case(
        "lookup-huge",
        cfg(speculative={"method": "ngram", "num_speculative_tokens": 3, "extra": {"prompt_lookup_max": 10**12}}),
        ("cfg.yaml", "extra.prompt_lookup_max", "1..65536"),
    ),
    Case(
        "lookup-on-another-method",
        cfg(speculative__extra={"prompt_lookup_min": 2}),
        ("cfg.yaml", "extra.prompt_lookup_min: an n-gram lookup setting, but method is 'mtp'"),
    ),
    Case("duplicate-hash-seeds", cfg(repeats=3, hash_seeds=[0, 0, 1]), ("cfg.yaml", "hash_seeds: duplicate seed")),
    Case("hash-seed-out-of-range", cfg(hash_seeds=[0, 2**40]), ("cfg.yaml", "hash_seeds")),
    Case("unknown-graph-mode", cfg(modes={"g": {"cudagraph_mode": "WARP"}}), ("cfg.yaml", "modes.g.cudagraph_mode")),
    Case("timeout-nan", cfg(timeout_s=float("nan")), ("cfg.yaml", "timeout_s")),
    Case("gate-tolerance-infinite", cfg(gate={"tolerance_pts": float("inf")}), ("cfg.yaml", "gate.tolerance_pts")),
    Case("temperature-string", cfg(sampling={"temperature": "hot"}), ("cfg.yaml", "sampling.temperature")),
    Case("name-dotdot", cfg(name=".."), ("cfg.yaml", "name:")),
    Case("name-too-long", cfg(name="n" * 300), ("cfg.yaml", "name:", "at most 100")),
    Case("env-nul-byte", cfg(builds={"b": {"env": {"X": "a\0b"}}}), ("cfg.yaml", "builds.b.env", "NUL")),
    Case(
        "synthetic-rate-above-1",
        cfg(speculative__extra={"synthetic_acceptance_rates": [1.5, 0.5, 0.2]}),
        ("cfg.yaml", "synthetic_acceptance_rates", "[0, 1]"),
    ),
    Case("unknown-patch", cfg(variants={"v": ["no-such-patch"]}), ("cfg.yaml", "variants.v: unknown patch")),
    # prompts
    Case("prompts-missing", cfg(prompts="gone.yaml"), ("gone.yaml", "prompts file not found")),
    Case(
        "prompts-is-a-folder",
        lambda tmp: (mkdir(lambda t: t / "pdir")(tmp), cfg(prompts="pdir")(tmp))[1],
        ("pdir", "prompts file is a folder"),
    ),
    Case("prompt-empty", prompts(**{"prompts": [{"id": "a", "text": ""}]}), ("prompts.yaml", "prompts.0.text")),
    Case("prompt-blank", prompts(**{"prompts": [{"id": "a", "text": "  \n"}]}), ("prompts.yaml", "blank")),
    Case(
        "prompt-huge",
        prompts(**{"prompts": [{"id": "a", "text": "x" * (MAX_PROMPT_CHARS + 1)}]}),
        ("prompts.yaml", "prompts.0.text", "at most"),
    ),
    Case("prompt-set-empty", prompts(**{"prompts": []}), ("prompts.yaml", "the prompt set is empty")),
    Case(
        "prompt-duplicate-id",
        prompts(**{"prompts": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}),
        ("prompts.yaml", "duplicate prompt id 'a'"),
    ),
    Case("prompt-text-list", prompts(**{"prompts": [{"id": "a", "text": ["x"]}]}), ("prompts.yaml", "prompts.0.text")),
    # manifests
    Case("manifest-missing", run_file("manifest.json", None), ("not a mtpbench run", "manifest.json")),
    Case("manifest-not-json", manifest_bytes(b"{nope"), ("manifest.json", "unreadable manifest")),
    Case("manifest-invalid-utf8", manifest_bytes(b'{"schema": "\xff"}'), ("manifest.json", "unreadable manifest")),
    Case("manifest-a-list", manifest(lambda m: [m], replace=True), ("manifest.json", "not a JSON object")),
    Case("manifest-newer-schema", manifest(lambda m: m.update(schema=2)), ("manifest.json", "run schema 2 is newer")),
    Case("manifest-older-schema", manifest(lambda m: m.update(schema=0)), ("manifest.json", "run schema 0 is older")),
    Case("manifest-schema-string", manifest(lambda m: m.update(schema="1")), ("manifest.json", "expected an integer")),
    Case("manifest-schema-missing", manifest(lambda m: m.pop("schema")), ("manifest.json", "got missing")),
    Case(
        "manifest-k-string",
        manifest(lambda m: m["config"]["speculative"].update(num_speculative_tokens="3")),
        ("manifest.json", "config.speculative.num_speculative_tokens: expected an integer k", "got '3'"),
    ),
    Case(
        "manifest-k-null",
        manifest(lambda m: m["config"]["speculative"].update(num_speculative_tokens=None)),
        ("manifest.json", "config.speculative.num_speculative_tokens"),
    ),
    Case(
        "manifest-k-huge",
        manifest(lambda m: m["config"]["speculative"].update(num_speculative_tokens=10**30)),
        ("manifest.json", "config.speculative.num_speculative_tokens"),
    ),
    Case(
        "manifest-repeat-nan",
        manifest(lambda m: m["cells"][0].update(repeat=float("nan"))),
        ("manifest.json", "cells.0.repeat"),
    ),
    Case(
        "manifest-wall-infinite",
        manifest(lambda m: m["cells"][0].update(wall_s=float("inf"))),
        ("manifest.json", "cells.0.wall_s"),
    ),
    Case(
        "manifest-gate-nan",
        manifest(lambda m: m["config"].update(gate={"tolerance_pts": float("nan")})),
        ("manifest.json", "config.gate.tolerance_pts"),
    ),
    Case("manifest-run-id-dotdot", manifest(lambda m: m.update(run_id="../../etc")), ("manifest.json", "run_id")),
    Case("manifest-no-prompts", manifest(lambda m: m.pop("prompts")), ("manifest.json", "prompts: missing")),
    Case("manifest-cells-null", manifest(lambda m: m.update(cells=None)), ("manifest.json", "cells")),
    Case("manifest-is-a-folder", run_file("manifest.json", "dir"), ("manifest.json", "a folder")),
    Case("run-is-a-file", lambda tmp: ["show", str(prompts_file(tmp))], ("prompts.yaml", "not a run folder")),
    Case("run-path-too-long", lambda tmp: ["show", str(tmp / ("r" * 300))], ("File name too long",)),
    # records
    Case("records-garbage-line", record(lambda r: "#!garbage", replace=True), ("records.jsonl:2:", "corrupt JSON")),
    Case("records-newer-schema", record(lambda r: r.update(schema=9)), ("records.jsonl:2:", "schema 9 is newer")),
    Case("records-not-an-object", record(lambda r: [1, 2], replace=True), ("records.jsonl:2:", "not a mtpbench")),
    Case("records-missing", run_file("records.jsonl", None), ("records.jsonl", "not found")),
    Case("records-is-a-folder", run_file("records.jsonl", "dir"), ("records.jsonl", "is a folder")),
    Case(
        "accepted-above-drafts",
        counts(num_drafts=10, accepted_per_pos=[11, 5, 1], num_accepted_tokens=17),
        ("records.jsonl:2:", "impossible counts", "only 10 drafts"),
    ),
    Case(
        "per-pos-growing",
        counts(accepted_per_pos=[5, 8, 1], num_accepted_tokens=14),
        ("records.jsonl:2:", "impossible counts", "grows with the position"),
    ),
    Case("per-pos-wrong-length", counts(accepted_per_pos=[5, 4]), ("records.jsonl:2:", "2 positions, but k is 3")),
    Case(
        "draft-tokens-above-k-drafts",
        counts(num_draft_tokens=10**6),
        ("records.jsonl:2:", "impossible counts", "num_draft_tokens"),
    ),
    Case("accepted-sum-mismatch", counts(num_accepted_tokens=1), ("records.jsonl:2:", "num_accepted_tokens")),
    Case("count-negative", counts(num_drafts=-1), ("records.jsonl:2:", "num_drafts")),
    Case("count-fraction", counts(num_drafts=2.5), ("records.jsonl:2:", "num_drafts")),
    Case("count-string", counts(num_drafts="200"), ("records.jsonl:2:", "num_drafts")),
    Case("count-null", counts(num_drafts=None), ("records.jsonl:2:", "num_drafts")),
    Case("count-huge", counts(num_drafts=10**30), ("records.jsonl:2:", "num_drafts")),
    Case(
        "count-infinite",
        record(lambda r: json.dumps(r).replace('"num_drafts": 200', '"num_drafts": Infinity'), replace=True),
        ("records.jsonl:2:", "num_drafts"),
    ),
    Case("record-wall-nan", counts(wall_s=float("nan")), ("records.jsonl:2:", "wall_s")),
    Case("record-no-output-sha", record(lambda r: r.pop("output_sha256")), ("records.jsonl:2:", "output_sha256")),
    Case("record-repeat-string", counts(repeat="0"), ("records.jsonl:2:", "repeat")),
    # baselines
    Case("baseline-newer-schema", baseline(lambda b: b.update(schema=7)), ("b.yaml", "baseline schema 7 is newer")),
    Case("baseline-not-a-mapping", baseline(lambda b: [b], replace=True), ("b.yaml", "expected a mapping")),
    Case("baseline-missing", compare_with(baseline_path=lambda t: t / "gone.yaml"), ("gone.yaml", "file not found")),
    Case("baseline-rate-above-100", entry0(rates_pct=[101.0, 96.3, 89.9]), ("b.yaml", "entries.0", "0..100")),
    Case("baseline-rate-negative", entry0(rates_pct=[98.2, 96.3, -1.0]), ("b.yaml", "entries.0", "0..100")),
    Case("baseline-rate-nan", entry0(rates_pct=[float("nan"), 96.3, 89.9]), ("b.yaml", "entries.0.rates_pct.0")),
    Case("baseline-rate-string", entry0(rates_pct=["high", 96.3, 89.9]), ("b.yaml", "entries.0.rates_pct.0")),
    Case("baseline-rates-growing", entry0(rates_pct=[90.0, 96.3, 89.9]), ("b.yaml", "grows with the position")),
    Case(
        "baseline-entry-length",
        entry0(rates_pct=[98.2, 96.3], avg_accepted=None),
        ("b.yaml", "entries.0.rates_pct", "k=3"),
    ),
    Case(
        "baseline-counts-impossible",
        entry0(
            rates_pct=[100.0, 90.0, 80.0],
            counts={
                "num_drafts": 10,
                "num_draft_tokens": 30,
                "num_accepted_tokens": 28,
                "accepted_per_pos": [11, 9, 8],
            },
        ),
        ("b.yaml", "entries.0", "impossible counts"),
    ),
    Case(
        "baseline-counts-disagree",
        entry0(
            rates_pct=[98.2, 96.3, 89.9],
            counts={"num_drafts": 10, "num_draft_tokens": 30, "num_accepted_tokens": 24, "accepted_per_pos": [9, 8, 7]},
        ),
        ("b.yaml", "entries.0", "counts give 90.000 %"),
    ),
    Case(
        "baseline-counts-fraction",
        entry0(
            counts={
                "num_drafts": 10.5,
                "num_draft_tokens": 30,
                "num_accepted_tokens": 24,
                "accepted_per_pos": [9, 8, 7],
            }
        ),
        ("b.yaml", "entries.0.counts.num_drafts"),
    ),
    Case(
        "baseline-other-k",
        baseline(
            lambda b: (
                b["fingerprint"].update(num_speculative_tokens=2),
                [e.update(rates_pct=e["rates_pct"][:2], avg_accepted=None) for e in b["entries"]],
            )
        ),
        ("k=3 vs baseline k=2",),
        code=4,
    ),
    Case(
        "baseline-k-null",
        baseline(lambda b: b["fingerprint"].update(num_speculative_tokens=None)),
        ("b.yaml", "fingerprint.num_speculative_tokens"),
    ),
    Case(
        "baseline-k-string",
        baseline(lambda b: b["fingerprint"].update(num_speculative_tokens="3")),
        ("b.yaml", "fingerprint.num_speculative_tokens: expected an integer k", "got '3'"),
    ),
    Case(
        "baseline-k-duplicates",
        baseline(lambda b: b["fingerprint"].update(num_speculative_tokens=[3, 3])),
        ("b.yaml", "fingerprint.num_speculative_tokens: duplicate k in [3, 3]"),
    ),
    Case("baseline-no-method", baseline(lambda b: b["fingerprint"].pop("method")), ("b.yaml", "fingerprint.method")),
    Case("baseline-truncated", baseline_text(lambda text: text[: len(text) // 2]), ("b.yaml",)),
    Case("baseline-cut-before-keys", baseline_text(lambda text: "# mtpbench baseline\n"), ("b.yaml", "empty document")),
    Case(
        "baseline-extra-not-a-mapping",
        baseline(lambda b: b["fingerprint"].update(speculative_extra="2..5")),
        ("b.yaml", "fingerprint.speculative_extra"),
    ),
    Case(
        "baseline-other-method",
        baseline(lambda b: b["fingerprint"].update(method="eagle3")),
        ("not comparable", "method mtp vs baseline eagle3"),
        code=4,
    ),
    Case(
        "baseline-other-lookup",
        baseline(lambda b: b["fingerprint"].update(speculative_extra={"prompt_lookup_min": 3})),
        ("not comparable", "speculative.extra.prompt_lookup_min=None vs baseline 3"),
        code=4,
    ),
    # options and output paths
    Case("tolerance-nan", compare_with("--tolerance", "nan"), ("--tolerance", "nan")),
    Case("tolerance-negative", compare_with("--tolerance", "-1"), ("--tolerance", "-1")),
    Case("tolerance-infinite", compare_with("--tolerance", "inf"), ("--tolerance", "inf")),
    # A missing output folder is made (one rule for every output); a file where the folder should be is refused.
    Case("junit-folder-is-a-file", compare_with("--junit", lambda t: str(_file(t / "no") / "g.xml")), ("--junit",)),
    Case("junit-is-a-folder", compare_with("--junit", lambda t: str(mkdir(lambda x: x / "j")(t))), ("--junit",)),
    Case("junit-name-too-long", compare_with("--junit", lambda t: str(t / ("j" * 300))), ("--junit", "too long")),
    Case(
        "out-is-a-file",
        lambda tmp: ["run", str(config_file(tmp)), "--no-compare", "--out", str(prompts_file(tmp))],
        ("prompts.yaml", "output folder is a file"),
    ),
    Case(
        "config-of-another-method-than-its-baseline",
        cfg(speculative__method="eagle3", baseline=str(PUBLISHED)),
        ("hostile is not comparable with baseline", "method eagle3 vs baseline mtp", "nothing was run"),
        code=4,
    ),
    Case(
        "config-of-another-k-than-its-baseline",
        lambda tmp: [
            "run",
            str(config_file(tmp, speculative__num_speculative_tokens=2, baseline=str(PUBLISHED))),
            "--out",
            str(tmp / "runs"),
        ],
        ("not comparable", "k=2 vs baseline k=3", "--no-compare"),
        code=4,
    ),
    Case(
        "drafter-path-missing",
        lambda tmp: [
            "run",
            str(config_file(tmp, speculative__model=str(tmp / "no-such-drafter"))),
            "--no-compare",
            "--out",
            str(tmp / "runs"),
        ],
        ("cfg.yaml", "drafter", "no-such-drafter", "no such file or folder"),
    ),
    Case(
        "out-name-too-long",
        lambda tmp: ["run", str(config_file(tmp)), "--no-compare", "--out", str(tmp / ("o" * 300))],
        ("ooo", "File name too long"),
    ),
    Case(
        "baseline-save-into-a-folder",
        lambda tmp: ["baseline", "save", str(a_run(tmp)), "--out", str(mkdir(lambda t: t / "b.yaml")(tmp)), "--force"],
        ("b.yaml", "is a folder"),
    ),
    Case(
        "baseline-save-folder-is-a-file",
        lambda tmp: ["baseline", "save", str(a_run(tmp)), "--out", str(_file(tmp / "no") / "b.yaml")],
        ("no",),
    ),
    Case("python-prints-garbage", interpreter("echo garbage"), ("--python", "without answering the probe: garbage")),
    Case("python-prints-bad-json", interpreter("echo '@@doctor {not json'"), ("--python", "garbage")),
    Case("python-prints-wrong-json", interpreter("echo '@@doctor [1, 2]'"), ("--python", "garbage")),
    Case("python-missing", lambda tmp: ["doctor", "--python", str(tmp / "nope"), "--no-engine"], ("--python", "nope")),
]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    # The columnar copy of a *valid* records file (written atomically when a run loads, columnar.py) is a
    # cache, not a half-written result: a command that fails later (on its baseline) may leave it.
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() and p.name != COPY
    }


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 45 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_is_one_line_with_its_exit_code(case: Case, tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    argv = case.build(work)
    before = snapshot(tmp_path)
    cwd = os.getcwd()
    os.chdir(work)  # a payload that runs a shell command would write here
    try:
        t0 = time.monotonic()
        res = CliRunner().invoke(app, argv, env={"MTPBENCH_WIDTH": "200", "COLUMNS": "200"})
        elapsed = time.monotonic() - t0
    finally:
        os.chdir(cwd)
    assert res.exit_code == case.code, (res.stdout, res.stderr, res.exception)
    assert "Traceback" not in res.output
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("mtpbench: error: "), lines[0]
    for needle in case.needles:
        assert needle in lines[0], lines[0]
    assert elapsed < 20, f"took {elapsed:.1f} s"  # bounded: no bomb expands, no engine starts
    assert snapshot(tmp_path) == before  # nothing half-written, nothing executed
    assert not (work / "PWNED").exists()


def test_a_torn_last_line_is_one_warning_line_and_the_command_still_works(tmp_path: Path) -> None:
    run = a_run(tmp_path)
    rec = run / "records.jsonl"
    whole = rec.read_bytes()
    fragment = b'{"schema":1,"type":"prompt","cell":"cpu/ea'
    rec.write_bytes(whole + fragment)
    res = CliRunner().invoke(app, ["show", str(run)], env={"MTPBENCH_WIDTH": "200"})
    assert res.exit_code == 0, res.output
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    n = whole.count(b"\n") + 1
    assert lines == [f"mtpbench: warning: {rec}:{n}: ignored a line cut off by a crash ({len(fragment)} bytes)"]


@pytest.mark.parametrize("case_id", ["yaml-alias-bomb", "manifest-newer-schema", "python-prints-garbage"])
def test_hostile_input_in_a_real_process(case_id: str, tmp_path: Path) -> None:
    # The same rows through the installed entry point in a subprocess: the real stderr, the real exit code.
    case = next(c for c in CASES if c.id == case_id)
    argv = case.build(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "mtpbench", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert proc.returncode == case.code, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("mtpbench: error: "), proc.stderr
    assert all(n in proc.stderr for n in case.needles), proc.stderr
