# syntax=docker/dockerfile:1
# The control service image: FastAPI app (service.app:create_app) under uvicorn, port 8000.
# Only the service's dependencies (pyproject's [project.dependencies] and the mlflow extra) are installed, at the exact
# versions of constraints.txt, the project's single pin file; nothing of MaxText/JAX.
#   docker build -f docker/service.Dockerfile -t rljob-service .
# In this repository it is linted (hadolint), not built: no base image is reachable here.

# --- build stage: resolve and install into a venv that the runtime stage copies as a whole
FROM python:3.12-slim-bookworm AS build

# Same uv as scripts/bootstrap.sh.
ARG UV_VERSION=0.13.9
# UV_COMPILE_BYTECODE: the venv is copied with its .pyc files; the runtime stage never writes any
# (PYTHONDONTWRITEBYTECODE, a read-only root), so without them each start would compile every import.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    UV_COMPILE_BYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

RUN python -m venv "${VIRTUAL_ENV}" \
 && pip install --no-cache-dir "uv==${UV_VERSION}"

WORKDIR /src
COPY constraints.txt pyproject.toml README.md ./
# `service` imports trainer.contract (the job spec, exit codes) and trainer.sizing (the fit estimate), so the
# trainer package is installed too; its heavy CPU/TPU dependencies live in the `trainer` extra, which is not
# requested. The `mlflow` extra (mlflow-skinny, the client only) is: RLJOB_MLFLOW_TRACKING_URI turns on the live
# export with nothing else to install.
COPY service ./service
COPY trainer ./trainer
RUN uv pip install --no-cache --python "${VIRTUAL_ENV}/bin/python" -c constraints.txt ".[mlflow]" \
 && python -c "import service.app, uvicorn, mlflow.tracking"

# --- runtime stage: no compiler, no uv, no sources; the same base so the venv's interpreter link holds
FROM python:3.12-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

COPY --from=build /opt/venv /opt/venv

# A fixed numeric uid so Kubernetes' runAsNonRoot can verify it without resolving names.
RUN groupadd --gid 10001 rljob \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin rljob
USER 10001:10001
WORKDIR /tmp

EXPOSE 8000
# For plain `docker run`; Kubernetes ignores HEALTHCHECK and uses the Deployment's probes instead.
# Python, not curl: the slim image has no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

# One worker: the service runs the launcher's watchers and reconciler in-process, which must be a single
# writer per deployment. --timeout-graceful-shutdown stays below the pod's terminationGracePeriodSeconds.
# --http: uvicorn's h11 protocol that closes idle connections and caps open ones (service/connection_limits.py).
ENTRYPOINT ["uvicorn", "service.app:create_app_from_env", "--factory", "--host", "0.0.0.0", "--port", "8000", \
            "--workers", "1", "--timeout-graceful-shutdown", "20", "--no-server-header", \
            "--http", "service.connection_limits:BoundedH11Protocol"]
