"""The words of k-dependent-acceptance (judge/signals/ksweep.py): a k sweep's cell whose acceptance departs at its k
only. Sentences only.
"""

from __future__ import annotations

from mtpbench.judge.findings.ksweep import KDependence
from mtpbench.render.words.units import delta_ci, pct, pts

__all__ = ["msg_k_dependence"]


def msg_k_dependence(n: KDependence) -> str:
    if n.basis == "reference":
        agree = ", ".join(f"k={k}" for k in n.agreeing_ks)
        return (
            f"at k={n.k} the engine departs from what its weights give ({', '.join(n.reference_findings)}), "
            f"while {agree} counts what they give: the draft path depends on k"
        )
    return (
        f"pos0 at k={n.k} {pct(n.run_rate)} % vs {pct(n.reference_rate)} % at k={n.reference_k} "
        f"({pts(n.delta)} pts, CI {delta_ci(n.ci)}, {n.prompts} prompts, beyond the {n.tolerance_pts or 0:g}-pt "
        "divergence tolerance): greedy drafting makes the first draft independent of k"
    )
