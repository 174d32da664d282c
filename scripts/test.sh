#!/usr/bin/env bash
# Sets everything up, then runs the tests. `scripts/test.sh` runs all of them (CI does this);
# `scripts/test.sh --fast` leaves out the ones marked slow (MaxText on CPU). Extra args go to pytest.
# Either way the run fails on any skip tests/allowed_skips.toml does not allow, and names it.
set -euo pipefail
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
.venv/bin/python -m pytest "${MARK[@]}" "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then echo "test.sh: pytest collected no tests" >&2; exit 1; fi
exit $rc
