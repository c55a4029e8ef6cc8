"""The report's figures drawn in a second process while the run is loaded and analysed.

matplotlib's import and the drawing of the two figures cost about two seconds of one CPU; loading and
judging a run of 10⁶ prompt records about three more. Done one after the other, `report` took 6.7 s on a
2-core box; a painter process started first imports matplotlib while the parent loads the run, draws the
heat map while the parent collects the cells, and the bar chart while the parent makes its diagnoses.

The protocol is pickles over the child's stdin and stdout, between two processes of the same mtpbench:
the parent writes `Job`s as their data become known; the child draws each as it arrives and answers with
all its `Drawn`s once its stdin is closed (so neither side can block the other on a full pipe). Anything
the painter does not deliver (it could not start, died, hung, refused a job) is drawn in the parent, which
then raises what the child met (no matplotlib: the install hint; a PNG that cannot be written: exit 2).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

# The child answers after its last job; a cold matplotlib font cache takes ~10 s to build, a hang takes this.
ANSWER_TIMEOUT_S = 120.0
# What may be written to a child that has not read yet without blocking the parent: under the 64 KiB of a
# Linux pipe. A job beyond it (a heat map of thousands of cells) is drawn in the parent instead. The two
# jobs of a report are a few kB.
PIPE_BUDGET = 48 * 1024


@dataclass(frozen=True)
class Job:
    """One figure: `plots.<figure>_figure(*args)`, as inline SVG and/or a PNG file."""

    name: str
    figure: str  # "acceptance" | "heatmap" | "rounds" (a soak run's) | "builds" (several builds) | "context"
    args: tuple[Any, ...]
    svg: bool
    png: Path | None


@dataclass(frozen=True)
class Drawn:
    name: str
    svg: str | None
    png: Path | None
    error: str | None = None


def draw(job: Job) -> Drawn:
    """Draw one job here (the child's work, and the parent's when the child did not deliver)."""
    import mtpbench.render.plots as plots

    plt = plots.require()
    make = {
        "acceptance": plots.acceptance_figure,
        "heatmap": plots.heatmap_figure,
        "rounds": plots.rounds_figure,
        "builds": plots.builds_figure,
        "context": plots.context_figure,
    }[job.figure]
    fig = make(*job.args)
    try:
        png = plots.save_png(fig, job.png, close=False) if job.png is not None else None
        svg = plots.svg(fig, close=False) if job.svg else None
    finally:
        plt.close(fig)
    return Drawn(job.name, svg, png)


class Painter:
    """The parent's handle. `Painter.start()` spawns the child; `Painter(None)` draws everything in-process."""

    def __init__(self, proc: subprocess.Popen[bytes] | None) -> None:
        self.proc = proc
        self.jobs: list[Job] = []
        self.sent = 0  # bytes written to the child

    @classmethod
    def start(cls, command: list[str] | None = None) -> Painter:
        """`command`: the child's argv (tests give broken ones); by default this mtpbench's painter.
        MTPBENCH_PAINTER=0: no child, everything drawn in this process (one CPU, a process limit)."""
        if os.environ.get("MTPBENCH_PAINTER", "").strip() == "0":
            return cls(None)
        # The child's numpy may skip huge-page advice like the CLI's (cli.py): it only holds small figures.
        env = {**os.environ, "NUMPY_MADVISE_HUGEPAGE": "0"}
        argv = command or [sys.executable, "-m", "mtpbench.render.painter"]
        if not all(argv):  # an embedded interpreter may have no sys.executable
            return cls(None)
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
            )
        except OSError:
            return cls(None)
        return cls(proc)

    def submit(self, job: Job) -> None:
        self.jobs.append(job)
        if self.proc is None or self.proc.stdin is None:
            return
        try:
            data = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
            if self.sent + len(data) > PIPE_BUDGET:
                return  # drawn here, in results(): never block on a child that does not read
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
            self.sent += len(data)
        except (OSError, ValueError, pickle.PicklingError):  # the child is gone: the parent draws
            self.close()

    def results(self, timeout: float = ANSWER_TIMEOUT_S) -> dict[str, Drawn]:
        """Every submitted job drawn, by name: the child's answers, the rest drawn here."""
        got: dict[str, Drawn] = {}
        if self.proc is not None:
            try:
                out, _ = self.proc.communicate(timeout=timeout)
                answers = pickle.loads(out) if self.proc.returncode == 0 else []
            except Exception:  # a hung, dead or garbled painter only costs the time to redraw
                answers = []
            self.close()
            if isinstance(answers, list):  # anything else unpickled is garbage too
                got = {d.name: d for d in answers if isinstance(d, Drawn) and d.error is None}
        return {job.name: got.get(job.name) or draw(job) for job in self.jobs}

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                if f is not None and not f.closed:
                    f.close()
            self.proc = None

    def __enter__(self) -> Painter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """The child: draw the jobs as they arrive; answer them all when the input ends."""
    import mtpbench.render.plots as plots
    from mtpbench.judge import figdata  # noqa: F401 - the jobs' data classes unpickle from it

    plots.require()  # import matplotlib now, while the parent is still loading the run
    answers: list[Drawn] = []
    while True:
        try:
            job = pickle.load(inp)
        except EOFError:
            break
        try:
            answers.append(draw(job))
        except Exception as exc:  # the parent redraws it and raises it there
            answers.append(Drawn(getattr(job, "name", "?"), None, None, f"{type(exc).__name__}: {exc}"))
    pickle.dump(answers, out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()


if __name__ == "__main__":
    # Through the module, not this __main__: the answers must pickle as mtpbench.render.painter.Drawn for the parent.
    from mtpbench.render.painter import serve as serve_as_module

    serve_as_module(sys.stdin.buffer, sys.stdout.buffer)
