"""The live view of a run: turns the runner's events into rich progress bars (cells, prompts, one line per
active cell-repeat) and one printed line per finished cell-repeat. `run`, `run --resume` and `selftest` show it.
And the bar of a replay from the weights (`reference`, a run's `reference_replay`): prompts replayed of all,
with what it is doing meanwhile (loading the pair, regenerating a batch's text: the long waits)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.status import Status
from rich.text import Text

from mtpbench.cli.common import console, err_console, say

if TYPE_CHECKING:
    from mtpbench.reference.compute import ReplayProgress

__all__ = ["InstallView", "ProgressView", "install_view", "progress_bars", "replay_bar", "replay_text"]


class ProgressView:
    """Turns runner events into rich progress: overall cells and prompts, one line per active cell-repeat
    (several at once with --jobs), and one printed line per finished cell-repeat."""

    def __init__(self, progress: Progress, total_cells: int, prompts: int, run_dir_file: Path | None = None) -> None:
        self.p = progress
        self.run_dir_file = run_dir_file
        self.cells = progress.add_task("cells", total=total_cells)
        self.prompts = progress.add_task("prompts", total=total_cells * prompts)
        self.per_cell = prompts
        self.active: dict[int, Any] = {}  # index -> rich task of a running cell-repeat
        self.done_prompts: dict[int, int] = {}

    def __call__(self, kind: str, payload: dict[str, Any]) -> None:
        cell = payload.get("cell")
        idx = int(payload.get("seq", -1))
        label = f"{cell.cell_id} r{cell.repeat} (PYTHONHASHSEED={cell.hash_seed})" if cell is not None else ""
        if kind == "run_start":
            if self.run_dir_file is not None:
                self.run_dir_file.parent.mkdir(parents=True, exist_ok=True)
                self.run_dir_file.write_text(f"{payload['path']}\n", encoding="utf-8")
            self.p.update(self.cells, total=payload.get("cells"))
            self.p.update(self.prompts, total=int(payload.get("cells", 0)) * self.per_cell)
        elif kind == "warning":  # about where the run runs (run/ray/auth.py): one line, before any cell
            self.p.console.print(
                Text("warning", style="yellow").append(f": {payload['text']}", style=""), soft_wrap=True
            )
        elif kind == "cell_start":
            devs = payload.get("devices")
            on = f" on {','.join(devs)}" if devs else ""
            self.active[idx] = self.p.add_task(f"  starting {label}{on}", total=self.per_cell)
            self.done_prompts[idx] = 0
        elif kind == "engine_ready" and idx in self.active:
            eff = payload.get("effective", {})
            self.p.update(
                self.active[idx],
                description=f"  {label} engine up in {payload.get('engine_start_s', 0):.1f} s "
                f"(cudagraph_mode {eff.get('cudagraph_mode')})",
            )
        elif kind == "prompt_done":
            self.done_prompts[idx] = self.done_prompts.get(idx, 0) + 1
            self.p.advance(self.prompts)
            if idx in self.active:
                self.p.advance(self.active[idx])
        elif kind == "cell_end":
            if idx in self.active:
                self.p.remove_task(self.active.pop(idx))
            self.p.advance(self.cells)
            # The prompts bar counts what was recorded, nothing else: a cell-repeat that failed, timed out
            # or was interrupted leaves its unrecorded prompts uncounted (issue 37: Ctrl-C during the first
            # engine start read "prompts 150/600" with none recorded).
            recorded = self.done_prompts.pop(idx, 0)
            status = payload.get("status")
            style = "green" if status == "ok" else "red"
            tail = ""
            if status != "ok":
                first = (str(payload.get("error") or "").splitlines() or [""])[0]
                tail = f", {recorded} of {self.per_cell} prompts recorded: {first}"
            self.p.console.print(
                f"[{style}]{status}[/] {label} in {payload.get('wall_s', 0):.1f} s{tail}", markup=True, highlight=False
            )


def progress_bars() -> Progress:
    """The bars every command that runs cells shows, on the command line's console."""
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


class InstallView:
    """What a build's provisioning shows: each step as a line (stderr, as every step line is), and while an
    installer runs, a live line under a spinner with the step and the installer's latest output (uv's
    "Resolved 150 packages", pip's "Downloading torch-…"): minutes of installing no longer look hung. The
    whole output goes to the build's log (run/envs/provision.py); on a console that is not a terminal the live
    line is not drawn."""

    def __init__(self, status: Status) -> None:
        self.status = status
        self.step_text = ""
        self.started = False

    def step(self, text: str) -> None:
        say(text)
        self.step_text = text
        if self.started:
            self.status.update(text)

    def output(self, line: str) -> None:
        if not self.started:
            self.status.start()
            self.started = True
        self.status.update(f"{self.step_text}: {line[:160]}")

    def close(self) -> None:
        if self.started:
            self.status.stop()


@contextmanager
def install_view() -> Iterator[InstallView]:
    """The view `resolve_builds` reports to (`on_step=view.step, on_output=view.output`), closed after."""
    view = InstallView(Status("", console=err_console))
    try:
        yield view
    finally:
        view.close()


def replay_text(p: ReplayProgress) -> str:
    """What a replay from the weights is doing, as its bar's label."""
    from mtpbench.reference.compute import ReplayStage

    if p.stage is ReplayStage.LOADING:
        return "reference: loading the pair"
    if p.stage is ReplayStage.REGENERATING:
        return f"reference: regenerating the greedy text of prompts {p.done + 1}-{p.done + p.batch}"
    return "reference: prompts replayed from the weights"


@contextmanager
def replay_bar(out: Console) -> Iterator[Callable[[ReplayProgress], None]]:
    """A bar over the prompts a replay from the weights works through, on `out`; yields the callback the
    replay reports to (compute_reference's `progress`)."""
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=out
    ) as bar:
        task = bar.add_task("reference: starting", total=None)

        def show(p: ReplayProgress) -> None:
            bar.update(task, completed=p.done, total=p.total, description=replay_text(p))

        yield show
