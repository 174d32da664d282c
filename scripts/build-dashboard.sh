#!/usr/bin/env bash
# Builds the team dashboard (dashboard/ -> service/dashboard/static/) from package-lock.json with
# npm ci and esbuild. Idempotent: skips when sources, lock file and output are unchanged.
# Needs Node >= 18 and npm. Usage: scripts/build-dashboard.sh [--force]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$ROOT/dashboard"
OUT="$ROOT/service/dashboard/static"
STAMP="$OUT/.build-stamp"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "build-dashboard: node and npm are needed to build the dashboard (Node >= 18); install them" >&2
  exit 1
fi
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)'; then
  echo "build-dashboard: Node $(node --version) is too old; the build needs Node >= 18" >&2
  exit 1
fi

# What the output depends on: the lock file, the build script, every source file, and Node's
# major version (esbuild's native binary is picked per platform at install time).
want() {
  {
    node -p 'process.platform + "-" + process.arch + "-" + process.versions.node.split(".")[0]'
    cd "$SRC" && find package.json package-lock.json build.mjs src -type f -print0 | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -d' ' -f1
}
WANT="$(want)"
if [[ "${1:-}" != "--force" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" && -f "$OUT/index.html" ]]; then
  exit 0
fi

cd "$SRC"
LOCK_SUM="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [[ ! -f node_modules/.rljob-lock-sha256 || "$(cat node_modules/.rljob-lock-sha256)" != "$LOCK_SUM" ]]; then
  echo "build-dashboard: npm ci (exact versions from dashboard/package-lock.json)"
  # --ignore-scripts: no package needs an install script (esbuild finds its native binary through
  # its optional dependency), and not running them keeps the build from fetching anything else.
  npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
  echo "$LOCK_SUM" > node_modules/.rljob-lock-sha256
fi
node build.mjs
echo "$WANT" > "$STAMP"
