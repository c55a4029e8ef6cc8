"""`mtpbench report --html`: one self-contained HTML file (inline CSS and SVG, no script, no network) that
opens from a CI artifact offline, and `--png DIR` with the same figures as PNG files.

Order on the page: the verdict, the gate's primary endpoint (the acceptance-length table by default, headed
as such) and the diagnoses first, then the figures (per-position acceptance per cell with intervals,
baseline and one dot per repeat; the prompt × position heat map with changed-text marks), the cells' graph
modes requested vs effective, the other checks (per position by default), and the fingerprint and
provenance folded below. Wide tables sit in a `.wide` box that wraps long cell, patch and prompt names and
scrolls what still does not fit, so no column is cut at a 1200-px window. Figures come from plots.py, their
data from views.py; every number is rendered from the Comparison, nothing is computed here.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtpbench import __version__
from mtpbench.errors import UserError
from mtpbench.judge import views
from mtpbench.judge.compare import Comparison
from mtpbench.judge.evidence import changed_text
from mtpbench.judge.figdata import BuildsView
from mtpbench.render.bindinggrid import CSS as BINDING_CSS
from mtpbench.render.bindinggrid import binding_section
from mtpbench.render.painter import Drawn, Job, Painter
from mtpbench.render.words import htmlpage as page_words
from mtpbench.render.words.context import BUCKET_HEADERS, PLOT_CAPTION, PLOT_TITLE, TABLE_TITLE, bucket_cells
from mtpbench.render.words.per_request import HISTOGRAM_NOTE, HISTOGRAM_TITLE
from mtpbench.render.words.positions import POSITIONS_NOTE, conditional_title, unconditional_title
from mtpbench.render.words.units import enum_text
from mtpbench.store.results import Run

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5rem auto;max-width:1200px;
  padding:0 1rem;color:#1a1a1a}
h1{font-size:1.3rem;margin:.2rem 0} h2{font-size:1.1rem;margin-top:1.8rem;border-bottom:1px solid #ddd}
.verdict{padding:.7rem 1rem;border-radius:6px;font-weight:600;font-size:1.05rem}
.exit-0{background:#e8f5e9;color:#1b5e20}.exit-1{background:#ffebee;color:#b71c1c}
.exit-3,.exit-2,.exit-4{background:#fff8e1;color:#8d6e00}
ul.diag{padding-left:1.1rem} ul.diag li{margin:.35rem 0}
.sev{font-weight:700;font-family:ui-monospace,monospace;font-size:.85em;padding:0 .3em;border-radius:3px}
.sev-fail{background:#c62828;color:#fff}.sev-warn{background:#f9a825;color:#000}.sev-info{background:#90caf9}
.cause{color:#555;font-size:.92em}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9em} th,td{border:1px solid #ddd;padding:.2rem .5rem;
  text-align:right;vertical-align:top} th{background:#f5f5f5} td.l,th.l{text-align:left}
td.regression{color:#b71c1c;font-weight:700} td.improvement{color:#0d47a1} td.pass{color:#1b5e20}
td.changed{color:#b71c1c} .downgraded{color:#8d6e00;font-weight:600}
figure{margin:.5rem 0} figure svg{max-width:100%;height:auto} figcaption{color:#555;font-size:.9em}
details{margin:.6rem 0} summary{cursor:pointer;font-weight:600} pre{background:#fafafa;border:1px solid #eee;
  padding:.6rem;overflow:auto;font-size:.82em;max-height:40rem}
.meta{color:#555}
.wide{max-width:100%;overflow-x:auto} .wide td{overflow-wrap:break-word}
"""


@dataclass
class Rendered:
    html_path: Path | None
    pngs: list[Path]


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _cls(names: list[str]) -> str:
    return f' class="{_e(" ".join(names))}"' if names else ""


def _verdict_text(comp: Comparison) -> str:
    from mtpbench.render import report

    return str(report.verdict_line(comp))


class Figures:
    """The report's figures, handed to a Painter as soon as their data are known: the heat map (and the soak
    and context figures) once the run's cells are measured (the painter step of judge/compare.judge),
    before its diagnoses, which this process then makes while the painter draws; the bars and the builds
    once the run is judged (`judged`), since they show its verdicts."""

    def __init__(self, painter: Painter, svg: bool, png_dir: Path | None) -> None:
        self.painter, self.svg, self.png_dir = painter, svg, png_dir
        self.changed: set[tuple[str, str]] = set()
        self.rows = "prompt"  # what a row of the heat map is (views.Heatmap.rows), for its caption

    def _submit(self, name: str, args: tuple[Any, ...]) -> None:
        png = None if self.png_dir is None else self.png_dir / f"{name}.png"
        self.painter.submit(Job(name, name, args, self.svg, png))

    def measured(self, run: Run, comp: Comparison) -> None:
        """The figures that need only the measured cells (the painter step, before the diagnoses)."""
        self.changed = changed_text(comp.cells)
        k = run.typed.k
        hm = views.heatmap(run, comp.cells, k, changed=self.changed)
        self.rows = hm.rows
        self._submit("heatmap", (hm.grid(k), page_words.heatmap_title(hm.rows)))
        rv = views.rounds_view(comp)
        if rv is not None:  # a soak run: acceptance per round of one engine
            self._submit("rounds", (rv, "acceptance per round within one process (pooled over prompts)"))
        if comp.context:  # a context sweep: acceptance per context bucket (judge/signals/context.py)
            self._submit("context", (comp.context, PLOT_TITLE))

    def judged(self, run: Run, comp: Comparison) -> None:
        """The figures that show verdicts, drawn from the judged comparison: the bars (a failing position red,
        the baseline's or the weights' rates marked, a failing cell's findings in its title) and the builds
        (each build's build-divergence): drawn before the diagnoses, a PNG carried no failure at all."""
        title = f"run {comp.run_id}" + (f" vs {comp.baseline}" if comp.baseline else "")
        self._submit("acceptance", (views.cell_views(comp), title))
        bv = views.builds_view(run, comp)
        if bv is not None:  # a run of several builds: the builds side by side
            self._submit("builds", (bv, f"builds against reference build {bv.reference_build}"))

    def drawn(self) -> dict[str, Drawn]:
        return self.painter.results()


def _diagnoses(comp: Comparison) -> str:
    if not comp.diagnoses:
        return "<p>No diagnoses: every check passed.</p>"
    from mtpbench.render.words import cause_text, finding_message, severity_word

    items = []
    for d in comp.diagnoses:
        word = severity_word(d)
        # An inconclusive finding (exit 5) wears the warning's colour, not the regression's.
        sev = "warn" if word == "INCONCLUSIVE" else enum_text(d.severity)
        name = "" if d.name == word.lower() else f" <b>{_e(d.name)}</b>"
        why = cause_text(d)
        cause = f'<br><span class="cause">likely cause: {_e(why)}</span>' if why else ""
        items.append(
            f'<li><span class="sev sev-{_e(sev)}">{_e(word)}</span>{name} '
            f"<code>{_e(d.cell)}</code>: {_e(finding_message(d))}{cause}</li>"
        )
    return '<ul class="diag">' + "".join(items) + "</ul>"


def _cells_table(comp: Comparison, changed: set[tuple[str, str]]) -> str:
    k = max((c.summary.counts.k for c in comp.cells), default=0)
    head = [
        "cell",
        "graph mode requested",
        "effective",
        "compilation",
        "patches",
        "repeats",
        "drafts",
        *[unconditional_title(i) for i in range(k)],
        *[conditional_title(i) for i in range(1, k)],
        "mean %",
        "AL pooled",
        "AL per request",
        "changed text",
    ]
    rows = []
    for c in comp.cells:
        s = c.summary
        req = c.requested.get("cudagraph_mode") or ("eager" if c.requested.get("enforce_eager") else "–")
        eff = c.effective.get("cudagraph_mode") or "?"
        down = ' class="l downgraded" title="the requested graph mode did not run"'
        eff_cls = down if c.graph_downgraded else ' class="l"'
        comp_mode = c.effective.get("compilation_mode") or ("eager" if c.effective.get("enforce_eager") else "–")
        patches = ", ".join(f"{p.get('name')} ({p.get('status')})" for p in c.patches if isinstance(p, dict))
        prompts = sorted(p for cell, p in changed if cell == c.cell)
        if len(prompts) > 12:  # a serving run can change thousands: the count and the first few
            prompts = [f"{len(prompts)} prompts: {', '.join(prompts[:10])}, …"]
        cells = [
            # A break opportunity after each "/" of build/mode/variant: a long build name wraps, not cut.
            f'<td class="l"><code>{_e(c.cell).replace("/", "/<wbr>")}</code></td>',
            f'<td class="l">{_e(req)}</td>',
            f"<td{eff_cls}>{_e(eff)}</td>",
            f'<td class="l">{_e(comp_mode)}</td>',
            f'<td class="l">{_e(patches or "none")}</td>',
            f"<td>{c.repeats_done}/{len(c.repeats)}</td>",
            f"<td>{s.counts.num_drafts}</td>",
            *[f"<td>{_pct(s.per_pos[i]) if i < s.counts.k else ''}</td>" for i in range(k)],
            *[f"<td>{_pct(s.conditional[i]) if i < s.counts.k else ''}</td>" for i in range(1, k)],
            f"<td>{_pct(s.mean)}</td>",
            f"<td>{'–' if s.acceptance_length is None else f'{s.acceptance_length:.2f}'}</td>",
            f"<td>{'–' if s.request_al is None else f'{s.request_al:.2f}'}</td>",
            f'<td class="l{" changed" if prompts else ""}">{_e(", ".join(prompts) or "none")}</td>',
        ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    th = "".join(f'<th class="l">{_e(h)}</th>' if n < 5 else f"<th>{_e(h)}</th>" for n, h in enumerate(head))
    return f'<table id="cells"><tr>{th}</tr>{"".join(rows)}</table>'


def _positions_table(comp: Comparison) -> str:
    """The console's and Markdown's rows (report.check_rows: MDE, prompts, the underpowered tag), as HTML."""
    from mtpbench.render.report import check_rows

    cols, rows = check_rows(comp.checks)
    head = "".join(
        f"<th{_cls(['l'] if just == 'left' else [])}>{_e(title)}{' ' + _e(sub) if sub else ''}</th>"
        for title, sub, just in cols
    )
    body = []
    for x, row in zip(comp.checks, rows, strict=True):
        tds = []
        for (title, _sub, just), (text, _detail, _style) in zip(cols, row, strict=True):
            cls = ["l"] if just == "left" else []
            if title == "verdict":
                cls.append(enum_text(x.verdict))
            tds.append(f"<td{_cls(cls)}>{_e(text)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    return f'<table id="checks"><tr>{head}</tr>{"".join(body)}</table>'


def _lengths_table(comp: Comparison) -> str:
    """Each cell's acceptance length against its baseline entry (report.length_rows: the console's and
    Markdown's rows)."""
    from mtpbench.render.report import length_rows

    lcols, lrows = length_rows(comp.lengths, comp.gate.primary == "acceptance_length")
    lhead = "".join(f"<th>{_e(title)}{' ' + _e(sub) if sub else ''}</th>" for title, sub, _ in lcols)
    lbody = "".join("<tr>" + "".join(f"<td>{_e(text)}</td>" for text, _d, _s in row) + "</tr>" for row in lrows)
    return f'<table id="lengths"><tr>{lhead}</tr>{lbody}</table>'


def _check_sections(comp: Comparison) -> tuple[str, str]:
    """The gate's primary endpoint (first on the page, headed so: issue 30) and the other table of checks
    (a diagnosis, below the figures). Without a baseline there is no primary section, and the second says
    why nothing was checked."""
    if not comp.checks and not comp.lengths:
        return "", f"<section><h2>Checks against the baseline</h2><p>{_e(page_words.NO_BASELINE)}</p></section>"
    primary = comp.gate.primary
    tables = {
        "acceptance_length": _lengths_table(comp) if comp.lengths else "",
        "positions": _positions_table(comp) if comp.checks else "",
    }
    other = "positions" if primary == "acceptance_length" else "acceptance_length"
    unchecked = ""
    if comp.unchecked:
        unchecked = f"<p class='meta'>{_e(page_words.unchecked_text(comp.unchecked))}</p>"
    first = tables[primary] or f"<p>{_e(page_words.NO_PRIMARY)}</p>"
    head = (
        f'<section id="primary"><h2>{_e(page_words.PRIMARY_HEADING[primary])}</h2>'
        f'<div class="wide">{first}</div>{unchecked}</section>'
    )
    second = ""
    if tables[other]:
        second = (
            f'<section id="diagnosis-checks"><h2>{_e(page_words.DIAGNOSIS_HEADING[other])}</h2>'
            f'<div class="wide">{tables[other]}</div></section>'
        )
    return head, second


def _reference_section(comp: Comparison) -> str:
    """A run replayed from the weights (`mtpbench reference`): the console's and Markdown's reference rows
    (reference.reference_rows), each position's engine rate beside the reference's; nothing otherwise."""
    if comp.reference is None:
        return ""
    from mtpbench.render.referencereport import ABOVE_STYLE, BELOW_STYLE, reference_rows
    from mtpbench.render.words.reference import reference_title

    classes = {BELOW_STYLE: "regression", ABOVE_STYLE: "improvement"}
    cols, rows = reference_rows(comp.reference)
    head = "".join(
        f"<th{_cls(['l'] if just == 'left' else [])}>{_e(title)}{' ' + _e(sub) if sub else ''}</th>"
        for title, sub, just in cols
    )
    body = []
    for row in rows:
        tds = []
        for (_title, _sub, just), (text, detail, style) in zip(cols, row, strict=True):
            cls = (["l"] if just == "left" else []) + ([classes[style]] if style in classes else [])
            tds.append(f"<td{_cls(cls)}>{_e(text)}{'<br>' + _e(detail) if detail else ''}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    table = f'<table id="reference"><tr>{head}</tr>{"".join(body)}</table>'
    return f'<section><h2>{_e(reference_title(comp.run_id))}</h2><div class="wide">{table}</div></section>'


def _prompts_summary(prompts: Any) -> Any:
    """The prompt set by name, hash and count, with the first ids: a run of 10⁵ prompts listed every id (MBs of
    HTML nobody reads); the hash identifies the set."""
    if not isinstance(prompts, dict) or not isinstance(prompts.get("ids"), list) or len(prompts["ids"]) <= 20:
        return prompts
    ids = prompts["ids"]
    return {**prompts, "ids": [*ids[:10], f"… {len(ids) - 10} more"], "count": len(ids)}


def _pre(obj: Any) -> str:
    return f"<pre>{_e(json.dumps(obj, indent=2, sort_keys=True, default=str))}</pre>"


def render_html(
    run: Run, comp: Comparison, figures: dict[str, str], changed: set[tuple[str, str]], rows: str = "prompt"
) -> str:
    """The page; `rows`: what a row of the heat map is (views.Heatmap.rows), which its caption names."""
    code = int(comp.exit_code)
    m = run.manifest
    cfg = m.get("config", {})
    spec = cfg.get("speculative", {})
    meta = (
        f"config <b>{_e(cfg.get('name'))}</b> · {_e(spec.get('method'))} k={_e(spec.get('num_speculative_tokens'))}"
        f" · prompts {_e(m.get('prompts', {}).get('name'))} ({_e(str(m.get('prompts', {}).get('sha256'))[:12])})"
        f" · created {_e(m.get('created'))} · status {_e(m.get('status'))}"
        + (f" · baseline <code>{_e(comp.baseline)}</code>" if comp.baseline else " · no baseline")
    )
    run_keys = ("run_id", "created", "finished", "status", "command", "config_path", "tool_version", "model", "drafter")
    provenance = {
        "run": {**{key: m.get(key) for key in run_keys}, "prompts": _prompts_summary(m.get("prompts"))},
        "config": cfg,
        "baseline": {"file": comp.baseline, "provenance": comp.baseline_provenance},
        "report": {"tool": "mtpbench", "version": __version__},
    }
    primary, diagnosis_checks = _check_sections(comp)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mtpbench report: {_e(comp.run_id)}</title>
<style>{CSS}{BINDING_CSS}</style></head>
<body>
<h1>mtpbench report: run <code>{_e(comp.run_id)}</code></h1>
<div id="verdict" class="verdict exit-{code}">{_e(_verdict_text(comp))}</div>
<p class="meta">{meta}</p>
{primary}
<section id="diagnoses"><h2>Diagnoses</h2>{_diagnoses(comp)}</section>
{binding_section(comp.binding)}
<section><h2>Per-position acceptance</h2>
<figure id="fig-acceptance">{figures["acceptance"]}
<figcaption>Bars: acceptance per position pooled over repeats (red: regression, blue: improvement), whiskers
its 95 % interval; black bar: the baseline; dots: each repeat (a fresh process with its own PYTHONHASHSEED):
dots apart mean cross-process instability.</figcaption></figure></section>
<section><h2>Prompt × position</h2>
<figure id="fig-heatmap">{figures["heatmap"]}
<figcaption>{_e(page_words.heatmap_caption(rows))}</figcaption></figure></section>
{_rounds_section(figures.get("rounds"))}
{_context_section(comp, figures.get("context"))}
{_histogram_section(comp)}
{_builds_section(views.builds_view(run, comp), figures.get("builds"))}
<section><h2>Cells: graph mode requested vs effective</h2>
<div class="wide">{_cells_table(comp, changed)}</div><p class="meta">{_e(POSITIONS_NOTE)}</p></section>
{diagnosis_checks}
{_reference_section(comp)}
<h2>Fingerprint and provenance</h2>
<details id="fingerprint"><summary>Fingerprint (per cell-repeat: versions, device, modes, patches)</summary>
{_pre(views.fingerprint(run, comp.cells))}</details>
<details id="provenance"><summary>Provenance (run, config, baseline)</summary>{_pre(provenance)}</details>
<p class="meta">mtpbench {_e(__version__)} · exit code {code}</p>
</body></html>
"""


def write_report(
    run: Run, comp: Comparison, html_path: Path | None, png_dir: Path | None, figures: Figures | None = None
) -> Rendered:
    """Write the HTML and/or the PNGs. `figures`: already handed to a painter (cli's report); without
    them the figures are drawn here, in this process."""
    if figures is None:
        figures = Figures(Painter(None), html_path is not None, png_dir)
    if not figures.painter.jobs:  # not measured yet: drawn here, in this process
        figures.measured(run, comp)
    if not any(job.name == "acceptance" for job in figures.painter.jobs):  # not judged yet either
        figures.judged(run, comp)
    drawn = figures.drawn()
    order = ["acceptance", "heatmap", "rounds", "builds", "context"]
    pngs = [p for p in (drawn[n].png for n in order if n in drawn) if p is not None]
    if html_path is not None:
        # rounds: soak runs only; builds: runs of several builds only; context: context sweeps only
        optional = ("rounds", "builds", "context")
        svgs = {n: drawn[n].svg or "" for n in order if n in drawn or n not in optional}
        page = render_html(run, comp, svgs, figures.changed, figures.rows)
        try:
            html_path.parent.mkdir(parents=True, exist_ok=True)
            html_path.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise UserError(f"{html_path}: cannot write the HTML report: {exc}") from None
    return Rendered(html_path, pngs)


def _builds_section(bv: BuildsView | None, svg: str | None) -> str:
    """The builds × positions table (and figure): per mode/variant and build, each position's acceptance and
    its gap to the reference build, the AL, and the build-divergence verdict (views.builds_view's numbers)."""
    if bv is None:
        return ""
    from mtpbench.render.report import builds_rows
    from mtpbench.render.words.builds import BUILDS_CAPTION, BUILDS_TABLE_NOTE

    head = ["mode/variant", "build", *[f"pos{i} % (Δ pts)" for i in range(bv.k)], "AL pooled", "build-divergence"]
    th = "".join(f'<th class="l">{_e(h)}</th>' if n < 2 else f"<th>{_e(h)}</th>" for n, h in enumerate(head))
    # The numbers are report.builds_rows', as the console and the Markdown show them.
    _cols, table = builds_rows(bv)
    names = [(group, build) for group in bv.groups for build in bv.builds]
    rows = []
    for (group, build), row in zip(names, table, strict=True):
        *pos, (al, _, _), (flag, _, _) = row[2:]
        ref = " (reference)" if build == bv.reference_build else ""
        cells = "".join(f"<td>{_e(main)}" + (f" {_e(detail)}" if detail else "") + "</td>" for main, detail, _ in pos)
        cls = ' class="regression"' if flag == "fail" else ""
        rows.append(
            f'<tr><td class="l">{_e(group)}</td><td class="l"><code>{_e(build)}</code>{_e(ref)}</td>{cells}'
            f"<td>{_e(al)}</td><td{cls}>{_e(flag)}</td></tr>"
        )
    figure = f'<figure id="fig-builds">{svg}<figcaption>{_e(BUILDS_CAPTION)}</figcaption></figure>' if svg else ""
    return (
        f'<section id="builds"><h2>Builds × positions</h2>{figure}'
        f'<div class="wide"><table id="builds-table"><tr>{th}</tr>'
        f'{"".join(rows)}</table></div><p class="meta">{_e(BUILDS_TABLE_NOTE)}</p></section>'
    )


def _rounds_section(svg: str | None) -> str:
    if not svg:
        return ""
    return f"""<section><h2>Per-round acceptance (soak)</h2>
<figure id="fig-rounds">{svg}
<figcaption>Acceptance per round of one long-lived engine, per position and the mean (black). Under greedy
decoding every round must repeat round 0 exactly; a dashed red line marks the first round that drifted, a
cross a round that stalled past its deadline.</figcaption></figure></section>"""


def _histogram_section(comp: Comparison) -> str:
    """Per cell, its verify steps by drafts accepted (report.histogram_rows, as the Markdown shows them)."""
    from mtpbench.render.report import histogram_rows

    if not any(h.requests for h in comp.per_request):
        return ""
    cols, rows = histogram_rows(comp.per_request)
    head = "".join(
        f"<th{_cls(['l'] if just == 'left' else [])}>{_e(title)}{' ' + _e(sub) if sub else ''}</th>"
        for title, sub, just in cols
    )
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{_cls(['l'] if just == 'left' else [])}>{_e(text)}</td>"
            for (_t, _s, just), (text, _d, _st) in zip(cols, row, strict=True)
        )
        + "</tr>"
        for row in rows
    )
    return (
        f'<section id="per-request"><h2>{_e(HISTOGRAM_TITLE)}</h2>'
        f'<div class="wide"><table id="acceptance-histogram"><tr>{head}</tr>{body}</table></div>'
        f'<p class="meta">{_e(HISTOGRAM_NOTE)}</p></section>'
    )


def _context_section(comp: Comparison, svg: str | None) -> str:
    """A context sweep's per-bucket table and its plot (judge/signals/context.py); nothing for any other run."""
    if not comp.context:
        return ""
    head = "".join(f"<th>{_e(h)}</th>" for h in BUCKET_HEADERS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{_e(x)}</td>" for x in bucket_cells(t.cell, b)) + "</tr>"
        for t in comp.context
        for b in t.buckets
    )
    figure = f'<figure id="fig-context">{svg}<figcaption>{_e(PLOT_CAPTION)}</figcaption></figure>' if svg else ""
    return (
        f'<section id="context"><h2>{_e(TABLE_TITLE)}</h2>'
        f'<div class="wide"><table class="context"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'
        f"{figure}</section>"
    )
