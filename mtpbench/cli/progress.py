"""The live view of a run: turns the runner's events into rich progress bars (cells, prompts, one line per
active cell-repeat) and one printed line per finished cell-repeat. `run`, `run --resume` and `selftest` show it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from mtpbench.cli.common import console

__all__ = ["ProgressView", "progress_bars"]


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
        elif kind == "warning":  # about where the run runs (run/rayauth.py): one line, before any cell
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
            missing = self.per_cell - self.done_prompts.pop(idx, 0)
            if missing > 0:
                self.p.advance(self.prompts, missing)
            status = payload.get("status")
            style = "green" if status == "ok" else "red"
            tail = "" if status == "ok" else f": {(str(payload.get('error') or '').splitlines() or [''])[0]}"
            self.p.console.print(
                f"[{style}]{status}[/] {label} in {payload.get('wall_s', 0):.1f} s{tail}", markup=True, highlight=False
            )


def progress_bars() -> Progress:
    """The bars every command that runs cells shows, on the command line's console."""
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )
