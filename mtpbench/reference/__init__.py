"""The reference stage (issue 29): the acceptance a greedy run *should* report, recomputed from the weights
alone in plain PyTorch + transformers (no vLLM), stored beside the run in runs/<id>/reference.jsonl.

walk.py is the engine's draft loop as arithmetic (which draft starts a request meets, what each accepts);
pair.py says which pairs are modelled and loads them; weights_replay.py regenerates the target's greedy text and
drafts from every start as vLLM's Gemma4 proposer does (deepseek_mtp.py: a DeepSeek target's own MTP layer,
chained as vLLM chains it; ngram.py: the lookup); compute.py replays a stored run and writes the file.
judge/signals/reference_comparison.py holds the engine's counts against it (it reads the file through
store/reference_records.py and never imports torch).
"""

from mtpbench.reference.compute import ReferenceOptions, ReplayProgress, ReplayStage, check_run, compute_reference
from mtpbench.reference.pair import PairInfo, check_pair
from mtpbench.reference.walk import Walk, walk

__all__ = [
    "PairInfo",
    "ReferenceOptions",
    "ReplayProgress",
    "ReplayStage",
    "Walk",
    "check_pair",
    "check_run",
    "compute_reference",
    "walk",
]
