"""The HTML report's small grid of the metadata-binding probe: per probed cell, draft layers × KV-cache
groups, each square the draft steps (over draft positions and repeats) in which that layer read that
group's attention metadata; the layer's own group is outlined, a read of another group is red. Layout
only: the numbers come from the judge (judge/signals/binding_readout.py `document`), the words from words/probes.py.
"""

from __future__ import annotations

import html
from typing import Any

from mtpbench.render.words.probes import (
    BINDING_CAPTION,
    BINDING_HEADING,
    attn_type_text,
    binding_verdict,
    layer_label,
    target_label,
)

CSS = """
table.binding td.own{outline:2px solid #2e7d32;outline-offset:-2px} table.binding td.bad{background:#ffcdd2;
  color:#b71c1c;font-weight:700} table.binding td.good{background:#e8f5e9}
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _reads(steps: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for step in steps:
        for g, n in step.items():
            out[str(g)] = out.get(str(g), 0) + int(n)
    return out


def _merged(by_seed: dict[str, dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for reads in by_seed.values():
        for key, n in reads.items():
            out[key] = out.get(key, 0) + int(n)
    return out


def _inputs(layer: dict[str, Any]) -> str:
    """The block table and the KV the layer read (all repeats): red where not its own group's / the expected."""
    own = str(layer.get("own_group"))
    tables = _merged(layer.get("tables_by_seed") or {})
    kv = _merged(layer.get("kv_by_seed") or {})
    expected = layer.get("expected_kv")
    table_text = ", ".join(f"group {g}: {n}" for g, n in tables.items()) or "·"
    kv_text = ", ".join(f"{target_label(t)}: {n}" for t, n in kv.items()) or "·"
    table_cls = "bad" if any(g != own for g in tables) else ("good" if tables else "")
    kv_cls = "bad" if expected and any(t != expected for t in kv) else ("good" if kv else "")
    return f'<td class="{table_cls}">{_e(table_text)}</td><td class="{kv_cls}">{_e(kv_text)}</td>'


def _grid(cell: str, doc: dict[str, Any]) -> str:
    """One column block per repeat (its PYTHONHASHSEED: the group order it produced), one column per group."""
    groups = doc.get("groups") or []
    seeds = [str(r.get("PYTHONHASHSEED")) for r in doc.get("repeats") or []]
    top = "".join(f'<th colspan="{len(groups)}">PYTHONHASHSEED {_e(s)}</th>' for s in seeds)
    head = "".join(
        f"<th>group {_e(g['id'])}<br><small>{_e(attn_type_text(g.get('type')))}</small></th>" for g in groups
    ) * len(seeds)
    rows = []
    for layer in doc.get("layers") or []:
        own = str(layer.get("own_group"))
        tds = []
        for seed in seeds:
            reads = _reads((layer.get("steps_by_seed") or {}).get(seed) or [])
            for g in groups:
                gid = str(g["id"])
                n = reads.get(gid, 0)
                cls = ["own"] if gid == own else []
                if n:
                    cls.append("good" if gid == own else "bad")
                tds.append(f'<td class="{" ".join(cls)}">{n or "·"}</td>')
        label = f"{layer_label(str(layer.get('layer')))} ({attn_type_text(layer.get('type'))}, group {own})"
        rows.append(f'<tr><td class="l">{_e(label)}</td>{"".join(tds)}{_inputs(layer)}</tr>')
    verdict = binding_verdict(bool(doc.get("verified")), ", ".join(seeds), bool(doc.get("graph_effective")))
    return (
        f"<h3><code>{_e(cell)}</code>: {_e(verdict)}</h3>"
        f'<table class="binding"><tr><th class="l" rowspan="2">draft layer</th>{top}'
        '<th rowspan="2">block table read</th><th rowspan="2">KV read</th></tr>'
        f"<tr>{head}</tr>"
        f"{''.join(rows)}</table>"
    )


def binding_section(binding: dict[str, dict[str, Any]]) -> str:
    """The report section, or "" when no cell asked for the probe."""
    if not binding:
        return ""
    grids = "".join(_grid(cell, doc) for cell, doc in binding.items())
    return (
        f'<section id="metadata-binding"><h2>{_e(BINDING_HEADING)}</h2>{grids}'
        f'<p class="meta">{_e(BINDING_CAPTION)}</p></section>'
    )
