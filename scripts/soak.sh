#!/usr/bin/env bash
# Runs the tests RUNS times in a row (default 5), exactly as scripts/test.sh runs them (its two
# pytest passes, `--tests-only`), while LOAD busy processes (default one per core) keep the CPUs
# saturated, and prints, for every run, its time and the tests that failed: a test that fails in one
# run and passes in another is a flake. The images must be built first (`scripts/test.sh` does it).
# Extra arguments go to pytest (e.g. `-k mpi`).
#
#   RUNS=5 LOAD=2 bash scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${RUNS:-5}"
load="${LOAD:-$(nproc)}"
out="$(mktemp -d)"

busy=()
stop_load() { [ ${#busy[@]} -eq 0 ] || kill "${busy[@]}" 2>/dev/null || true; }
trap stop_load EXIT
for _ in $(seq "$load"); do
  .venv/bin/python -c "while True: pass" &
  busy+=($!)
done
echo "== $runs runs of the tests under $load busy processes; reports in $out"

for run in $(seq "$runs"); do
  started=$(date +%s)
  mkdir -p "$out/run-$run"
  EMULATOR_REQUIRE_DOCKER=1 JUNIT_DIR="$out/run-$run" bash scripts/test.sh --tests-only "$@" \
    >"$out/run-$run.log" 2>&1 || true
  # The last line of each pass: its counts and seconds.
  summary=$(grep -E "(passed|failed|error).* in [0-9.]+s" "$out/run-$run.log" | tr -d '=' | paste -sd ';' -)
  echo "run $run: $(( $(date +%s) - started )) s;$summary"
done

# One line per test that failed in any run: the runs it failed in.
.venv/bin/python - "$out" "$runs" <<'EOF'
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

out, runs = Path(sys.argv[1]), int(sys.argv[2])
failed: dict[str, list[int]] = {}
for run in range(1, runs + 1):
    cases = [c for report in sorted((out / f"run-{run}").glob("*.xml")) for c in ET.parse(report).iter("testcase")]
    for case in cases:
        if case.find("failure") is not None or case.find("error") is not None:
            failed.setdefault(f"{case.get('classname')}::{case.get('name')}", []).append(run)
for name, where in sorted(failed.items()):
    kind = "fails every run" if len(where) == runs else "FLAKE"
    print(f"{kind}: {name} (runs {', '.join(map(str, where))})")
print(f"{len(failed)} test(s) failed at least once in {runs} runs")
EOF
