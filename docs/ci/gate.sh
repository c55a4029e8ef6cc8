#!/usr/bin/env bash
# Plain-shell acceptance gate for any CI (Jenkins, GitLab, Buildkite, cron): run, gate, report.
# The gate's exit code is the job's; the HTML report and the JUnit file are written whatever the verdict,
# for the CI to archive (Jenkins: archiveArtifacts + junit 'mtpbench-junit.xml').
# It gates the run this job made (run --run-dir-file), never whatever run folder is newest: with a mistyped
# config and an older run in $OUT, gating `ls runs | tail -1` printed PASS and exited 0.
set -uo pipefail
CONFIG=${CONFIG:-configs/gemma4-mtp-ascend.yaml}
BASELINE=${BASELINE:-baselines/gemma4-mtp-v0.26.0rc1.yaml}
OUT=${OUT:-runs}
RUN_FILE=${RUN_FILE:-mtpbench-run-dir.txt}

mtpbench run "$CONFIG" --out "$OUT" --no-compare --run-dir-file "$RUN_FILE"
run_code=$?                               # a failed cell is judged by compare below (exit 3)
if [ ! -s "$RUN_FILE" ]; then
  echo "mtpbench run made no run folder (exit $run_code): nothing to gate" >&2
  [ "$run_code" -ne 0 ] && exit "$run_code" || exit 3
fi
RUN=$(cat "$RUN_FILE")
mtpbench compare "$RUN" --baseline "$BASELINE" --junit mtpbench-junit.xml
code=$?
mtpbench report "$RUN" --baseline "$BASELINE" --html mtpbench-report/index.html --png mtpbench-report/png
mtpbench history --runs "$OUT" --html mtpbench-report/history.html > mtpbench-report/history.txt || true
exit $code
