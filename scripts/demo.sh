#!/usr/bin/env bash
# Sets everything up, then runs the main job on the embedded default: the control service with SQLite,
# the local-process launcher and local artifact storage; builds a tiny Llama-architecture model and a
# GSM8K-format dataset offline, submits the tiny GRPO job over REST, follows it to SUCCEEDED and prints
# where the artifacts are. Takes a few minutes on 2 CPU cores.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/bootstrap.sh
# Bytecode of what the service and the trainer's stages import is written by the first process that imports it
# (bootstrap.sh compiles none), where this machine's PYTHONDONTWRITEBYTECODE would recompile it in every stage.
unset PYTHONDONTWRITEBYTECODE
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
exec .venv/bin/python scripts/demo.py "$@"
