"""Rendering of judge/calibrate.py's answer: one Markdown table row per rule and noise model (what the rule
costs at its own sample size), and `--emit`: the entry each upstream file takes, set at the tolerance that holds
the false-alarm rate to 1 % under the bursty noise, with a comment saying what it was set for. Every shape
written here reads back with store/upstream_shapes.py."""

from __future__ import annotations

from mtpbench.judge.calibrate import DROP_PCT, FALSE_ALARM_GOAL, POWER_GOAL, Calibration, Operating


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _drop(x: float | None) -> str:
    return "not caught" if x is None else f"{x:.2f} %"


def _row(c: Calibration, op: Operating, label: str) -> str:
    return (
        f"| `{c.rule.name}` | {c.spread} | {c.prompts} x {c.max_tokens} | {label} | {op.tolerance:.4f} | "
        f"{_pct(op.false_alarm)} | {_pct(op.power_drop)} | {_pct(op.power_collapse)} | {_drop(op.smallest_caught)} |"
    )


def calibration_table(cals: list[Calibration]) -> str:
    """The rules' operating points, Markdown (the console prints it as is)."""
    head = [
        f"| rule | spread | prompts x max_tokens | noise | tolerance | false alarm | power at {DROP_PCT:g} % AL drop "
        f"| power at collapse | smallest AL drop caught {POWER_GOAL:.0%} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for c in cals:
        rows.append(_row(c, c.greedy, "greedy, rule's own"))
        rows.append(_row(c, c.bursty, f"{c.noise}, rule's own"))
        rows.append(_row(c, c.calibrated, f"{c.noise}, mtpbench FA <= {FALSE_ALARM_GOAL:.0%}"))
    notes = [
        "",
        "tolerance: the one number the rule's file sets (rtol, 1 - floor, margin); collapse: the seed's "
        "(mean acceptance 94.8 % -> 5.3 %), an AL drop of " + ", ".join(f"{c.collapse_pct:.1f} %" for c in cals) + ".",
        f"{cals[0].bursty.reps} bursty draws per scenario, seed {cals[0].seed}; greedy: one deterministic run."
        if cals
        else "",
        *(f"- `{c.rule.name}`: {c.rule.source}" + (f"; {c.rule.notes}" if c.rule.notes else "") for c in cals),
    ]
    return "\n".join(head + rows + notes)


def _comment(c: Calibration, mark: str) -> str:
    op = c.calibrated
    return (
        f"{mark} mtpbench calibrate ({c.rule.name}, {c.prompts} prompts x {c.max_tokens} tokens, {c.spread}): "
        f"tolerance {op.tolerance:.4f} set for a false-alarm rate of {_pct(op.false_alarm)} "
        f"(goal {FALSE_ALARM_GOAL:.0%}, {c.noise} noise, {op.reps} draws, seed {c.seed}); power "
        f"{_pct(op.power_drop)} at a {DROP_PCT:g} % AL drop, {_pct(op.power_collapse)} at the collapse; "
        f"smallest drop caught {POWER_GOAL:.0%}: {_drop(op.smallest_caught)}"
    )


def emit(c: Calibration, fmt: str, key: str = "mtpbench") -> str:
    """The entry `fmt`'s upstream file takes, at the calibrated tolerance (store/upstream_shapes.py reads it)."""
    tol = c.calibrated.tolerance
    al = float(c.golden.al[0])
    pos = [round(float(x), 4) for x in c.golden.per_pos[0]]
    if fmt == "vllm-acceptance-length":
        return "\n".join(
            [
                _comment(c, "#"),
                "# The AL check reads the module's DEFAULT_RTOL; the per-position checks read rtol.",
                f"DEFAULT_RTOL = {tol:.4f}",
                "Eagle3ModelConfig(",
                '    verifier="<target>",',
                '    drafter="<drafter>",',
                f"    expected_acceptance_length={al:.4f},",
                f"    expected_acceptance_lengths_per_pos={pos},",
                f'    id="{key}",',
                f"    rtol={tol:.4f},",
                "),",
            ]
        )
    if fmt == "vllm-acceptance-rates":
        # utils.py multiplies the expected value by 0.95: the value written puts the floor where it belongs.
        expected = al * (1.0 - tol) / 0.95
        return "\n".join(
            [
                _comment(c, "#"),
                f"# measured mean per-request AL {al:.4f}; utils.py asserts mean >= expected x 0.95,",
                f"# so the floor {al * (1.0 - tol):.4f} is written as expected {expected:.4f}.",
                f'expected_acceptance_lengths = {{"{key}": {expected:.4f}}}',
            ]
        )
    if fmt == "vllm-ascend-golden":
        return "\n".join([_comment(c, "#"), f"GOLDEN = {pos}", f"ATOL = {tol:.4f}  # (a >= b) or (b - a < ATOL)"])
    if fmt == "trtllm-min-al":
        return "\n".join([_comment(c, "#"), f"{key}:", f"  ref_al: {al:.6f}", f"  min_al: {al * (1.0 - tol):.6f}"])
    if fmt == "sglang-threshold":
        return "\n".join([_comment(c, "#"), f"accept_length_thres = {al * (1.0 - tol):.4f}"])
    if fmt == "inferencex":
        k = len(pos)
        return "\n".join(
            [
                _comment(c, "#"),
                "# InferenceX commits the AL alone; the threshold above is what a gate on it should use.",
                f"{key}:",
                f"  thinking_off: {{{k}: {al:.4f}}}",
            ]
        )
    raise ValueError(f"unknown shape {fmt!r}")
