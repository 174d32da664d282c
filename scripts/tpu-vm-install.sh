#!/usr/bin/env bash
# Installs a wheelhouse built by scripts/tpu_vm_wheelhouse.py into a fresh virtualenv, with no package index,
# then checks the install. The build copies this script into the wheelhouse as install.sh (docs/tpu-vm.md):
#
#   ~/rljob-wheelhouse/install.sh --venv ~/rljob-venv [--spec SPEC] [--expect-tpu] [--python PY]
#   ~/rljob-wheelhouse/install.sh --venv ~/rljob-venv --check [--spec SPEC] [--expect-tpu]   # the checks alone
#
# --wheelhouse DIR   the wheelhouse (default: the directory this script is in)
# --python PY        the interpreter for the venv; it must be the wheelhouse's Python (manifest.json's
#                    python_version, 3.12 by default). Default: $PYTHON, else pythonX.Y, else python3 if it is
#                    X.Y, else pyenv's X.Y
# --spec SPEC        also run `python -m trainer plan --spec SPEC` from the venv (offline: HF_HUB_OFFLINE=1)
# --expect-tpu       fail unless JAX in the venv sees TPU devices
# --check            install nothing: run the checks on the existing --venv (after changing TPU_LIBRARY_PATH, say)
#
# pip runs with --no-index and --require-hashes on requirements.lock: every wheel comes from the wheelhouse's
# wheels/ at the hash the build recorded, and nothing is asked of any index. This machine's pip settings (PIP_*,
# pip.conf) are left out, as in the build.
set -euo pipefail

WHEELHOUSE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="" SPEC="" EXPECT_TPU=0 CHECK_ONLY=0 PY="${PYTHON:-}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --wheelhouse) WHEELHOUSE="$(cd "$2" && pwd)"; shift 2 ;;
    --venv) VENV="$2"; shift 2 ;;
    --python) PY="$2"; shift 2 ;;
    --spec) SPEC="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
    --expect-tpu) EXPECT_TPU=1; shift ;;
    --check) CHECK_ONLY=1; shift ;;
    *) echo "install.sh: unknown argument $1 (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
fail() { echo "install.sh: $*" >&2; exit 1; }
[[ -n "$VENV" ]] || fail "--venv DIR is required"
[[ -f "$WHEELHOUSE/manifest.json" && -f "$WHEELHOUSE/requirements.lock" ]] || fail "$WHEELHOUSE holds no wheelhouse (manifest.json, requirements.lock)"
VENV="$(mkdir -p "$(dirname "$VENV")" && cd "$(dirname "$VENV")" && pwd)/$(basename "$VENV")"

manifest_field() { sed -n "s/^  \"$1\": \"\\([^\"]*\\)\",\$/\\1/p" "$WHEELHOUSE/manifest.json"; }
py_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }

find_python() {  # the wheels' Python: binary wheels are built for one minor version
  local want="$1" candidate
  if [[ -n "$PY" ]]; then
    [[ "$(py_version "$PY")" == "$want" ]] || fail "$PY is not Python $want, which the wheels are built for"
    echo "$PY"; return
  fi
  # pyenv's own installs too: its shims answer only for the version selected where they run.
  for candidate in "python$want" python3 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/python3; do
    if [[ "$(py_version "$candidate")" == "$want" ]]; then command -v "$candidate"; return; fi
  done
  fail "no Python $want found (python$want, python3, pyenv's); the wheels are built for it: pass --python or PYTHON"
}

install_venv() {
  [[ -e "$VENV" ]] && fail "$VENV exists: the install goes into a fresh virtualenv"
  local python started=$SECONDS
  python="$(find_python "$(manifest_field python_version)")"
  # A wheel for a newer glibc than the machine's would install and then fail to load.
  "$python" - "$(manifest_field glibc)" <<'CHECK' || exit 1
import platform, sys
lib, version = platform.libc_ver()
have = tuple(int(x) for x in version.split(".")[:2]) if lib == "glibc" else (0, 0)
if have < tuple(int(x) for x in sys.argv[1].split(".")):
    sys.exit(f"install.sh: this machine's C library is {lib or 'unknown'} {version}; the wheels need glibc >= {sys.argv[1]}")
CHECK
  echo "install.sh: creating $VENV with $python ($("$python" --version))"
  "$python" -m venv "$VENV"
  local name
  for name in "${!PIP_@}"; do unset "$name"; done
  PIP_CONFIG_FILE=/dev/null "$VENV/bin/python" -m pip install --isolated --disable-pip-version-check --no-cache-dir --quiet \
    --no-index --find-links "$WHEELHOUSE/wheels" --require-hashes -r "$WHEELHOUSE/requirements.lock"
  PIP_CONFIG_FILE=/dev/null "$VENV/bin/python" -m pip check --isolated --disable-pip-version-check
  echo "install.sh: installed $(wc -l < "$WHEELHOUSE/requirements.lock") wheels in $((SECONDS - started)) s"
}

check_venv() {
  [[ -x "$VENV/bin/python" ]] || fail "$VENV holds no virtualenv"
  # Outside any checkout, so that `python -m trainer` is the venv's, not a source tree's.
  cd "$VENV"
  if [[ -n "$SPEC" ]]; then
    HF_HUB_OFFLINE=1 "$VENV/bin/python" -m trainer plan --spec "$SPEC"
  fi
  if ! grep -q '^jax==' "$WHEELHOUSE/requirements.lock"; then
    [[ $EXPECT_TPU == 0 ]] || fail "--expect-tpu, but the wheelhouse has no jax"
    return
  fi
  "$VENV/bin/python" - "$EXPECT_TPU" <<'CHECK'
import sys
import jax
devices = jax.devices()
print(f"install.sh: jax {jax.__version__} sees {len(devices)} {devices[0].platform} device(s): {devices}")
if sys.argv[1] == "1" and devices[0].platform != "tpu":
    sys.exit("install.sh: --expect-tpu, but JAX found no TPU (one process at a time can hold it; TPU_LIBRARY_PATH "
             "names a libtpu.so to load instead of the wheel's: docs/tpu-vm.md)")
CHECK
}

[[ $CHECK_ONLY == 1 ]] || install_venv
check_venv
echo "install.sh: ready: $VENV/bin/python -m trainer run --spec SPEC"
