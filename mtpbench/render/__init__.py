"""The render stage: words and layout of what the judge found, computing nothing. Its outputs and their modules:
the console (report.py: the comparison's tables and verdict line; serving.py: the serving table; sizingreport.py;
historyreport.py), the JSON document and Markdown (the same modules: one row builder feeds every table), JUnit
(junit.py), GitHub Actions' step summary and annotations and a console that never crops in a log (ci.py), the
HTML report and its PNG figures (htmlreport.py, with bindinggrid.py, plots.py and painter.py, the second process
that draws them). Every sentence (a finding, its likely cause, the verdict line) is in words/, one module per
finding family; rounds.py is a soak run's per-round column and JSON part, which report.py lays out.

Callers import each function from the module that defines it (no face here): the CLI's console needs rich
alone, and the painter's process (`python -m mtpbench.render.painter`) must start drawing while the parent
loads the run, so importing one renderer must not import every renderer's dependencies.
"""
