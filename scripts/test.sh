#!/usr/bin/env bash
# Sets everything up, then runs the tests. `scripts/test.sh` runs all of them (CI does this);
# `scripts/test.sh --fast` skips the ones marked slow (MaxText on CPU). Extra args go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MARK=()
if [[ "${1:-}" == "--fast" ]]; then MARK=(-m "not slow"); shift; fi

scripts/bootstrap.sh
if [[ -x scripts/install-system-deps.sh ]]; then scripts/install-system-deps.sh; fi

export PYTHONUNBUFFERED=1
# Tests never reach a hub: models, tokenizers and data are built locally by the tests.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
set +e
.venv/bin/python -m pytest "${MARK[@]}" "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then echo "test.sh: pytest collected no tests" >&2; exit 1; fi
exit $rc
