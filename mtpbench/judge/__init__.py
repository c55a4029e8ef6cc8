"""From records to verdicts: the one evidence stage (evidence.py), statistics, checks, typed findings and the
exit-code policy. Computes; never prints or words.

The way a judging goes (compare.py says it step by step): `admit` a baseline (or refuse it, exit 4),
`collect_evidence` once, `make_plan`, then `check` and `diagnose`, put together by `combine` into a
`Comparison`; `judge` makes the whole pass, with a baseline or without one.
`history` and `baseline save` read the same evidence (history.py, save.py).

Callers import each name from the module that defines it (no face here: importing the package stays free,
so the report's painter, which unpickles figdata.py's classes, does not pay for pandas and scipy).

The spine is this folder's top (evidence, stats, plan, checks, diagnoses, compare); beside it findings/ (the
typed payloads, one module per family, named as render/words/ names their sentences) and signals/ (the
per-signal judges diagnoses.py composes); history, sizing, save, views and figdata are the tools.
"""
