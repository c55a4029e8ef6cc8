#!/usr/bin/env bash
# Plain-shell acceptance gate for any CI (Jenkins, GitLab, Buildkite, cron): run, gate, report.
# The gate's exit code is the job's; the HTML report and the JUnit file are written whatever the verdict,
# for the CI to archive (Jenkins: archiveArtifacts + junit 'mtpbench-junit.xml').
set -uo pipefail
CONFIG=${CONFIG:-configs/gemma4-mtp-ascend.yaml}
BASELINE=${BASELINE:-baselines/gemma4-mtp-v0.26.0rc1.yaml}
OUT=${OUT:-runs}

mtpbench run "$CONFIG" --out "$OUT" --no-compare || true      # a failed cell is judged by compare (exit 3)
RUN=$(ls -d "$OUT"/*/ | tail -n 1)
mtpbench compare "$RUN" --baseline "$BASELINE" --junit mtpbench-junit.xml
code=$?
mtpbench report "$RUN" --baseline "$BASELINE" --html mtpbench-report/index.html --png mtpbench-report/png
mtpbench history --runs "$OUT" --html mtpbench-report/history.html > mtpbench-report/history.txt || true
exit $code
