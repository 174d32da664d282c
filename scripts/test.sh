#!/usr/bin/env bash
# Sets everything up, then runs the tests. `scripts/test.sh` runs all of them (CI does this);
# `scripts/test.sh --fast` leaves out the ones marked slow (MaxText on CPU). Extra args go to pytest;
# the dashboard's node tests (tests/dashboard/unit) run every time.
# Either way the run fails on any skip tests/allowed_skips.toml does not allow, and names it.
# pytest runs on RLJOB_TEST_WORKERS pytest-xdist workers (default 2, one per core of a CI machine; 0 runs in
# this process): the slow tests in the two lanes of tests/lanes.py, the others wherever a worker is free.
set -euo pipefail
STARTED_S=$SECONDS
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MARK=()
if [[ "${1:-}" == "--fast" ]]; then MARK=(-m "not slow"); shift; fi

scripts/bootstrap.sh
if [[ -x scripts/install-system-deps.sh ]]; then scripts/install-system-deps.sh; fi

export PYTHONUNBUFFERED=1
# A skip, xfail or xpass not allowed by tests/allowed_skips.toml fails the run (tests/skip_policy.py).
# Strict here, with or without --fast: the system packages (chromium, PostgreSQL) were just installed
# above, so a test skipped for lack of them means a broken setup, not a machine that cannot run it.
export RLJOB_SKIP_POLICY=strict
# Tests never reach a hub: models, tokenizers and data are built locally by the tests.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
set +e
# The dashboard's pure modules (formatting, view model, SSE parser, phase facts) under node's own
# test runner; run first and reported at the end, so one run shows every failure.
if command -v node >/dev/null 2>&1; then
  node --test tests/dashboard/unit/*.test.mjs
  node_rc=$?
else
  echo "test.sh: node is missing (scripts/install-system-deps.sh installs it); the dashboard's unit tests cannot run" >&2
  node_rc=1
fi
# The workers take the slow lanes whole (tests/lanes.py schedules them) and the other tests one by one.
.venv/bin/python -m pytest -n "${RLJOB_TEST_WORKERS:-2}" --durations=25 "${MARK[@]}" "$@"  # the slowest, for keeping CI within its budget
rc=$?
set -e
elapsed=$((SECONDS - STARTED_S))
# CI's limit for .ci/run is 90 minutes; this run's share of it, setup included.
printf 'test.sh: %dm%02ds in all, %d%% of CI'"'"'s 90 minutes\n' $((elapsed / 60)) $((elapsed % 60)) $((elapsed * 100 / 5400))
if [[ $rc -eq 5 ]]; then echo "test.sh: pytest collected no tests" >&2; exit 1; fi
if [[ $rc -eq 0 && $node_rc -ne 0 ]]; then echo "test.sh: the dashboard's node tests failed (see above)" >&2; exit 1; fi
exit $rc
