"""Kubernetes manifests for the CLI (`rljob render`, `rljob submit --dry-run`): one helper, so both
print the same objects the kubernetes launcher would create and fail with the same messages."""

from __future__ import annotations

from service.settings_env import SettingsInvalid, read_settings
from trainer.contract import JobSpec

from .client import CliError, CliExit


def render_k8s_manifests(job_spec: JobSpec, job_id: str | None, what: str) -> str:
    """A multi-document YAML stream for `kubectl apply -f -`; CliError (exit 2) says why not.

    Settings come from RLJOB_K8S_* (K8sSettings), exactly as the service's launcher reads them.
    """
    try:
        from service.adapters.k8s.errors import K8sBackendError
        from service.adapters.k8s.render import render_manifests_yaml
        from service.adapters.k8s.settings import K8sSettings
    except ImportError as e:
        raise CliError(f"the Kubernetes renderer is not available in this installation ({e})", CliExit.FAILED) from e
    try:
        settings = read_settings(K8sSettings)
    except SettingsInvalid as e:
        raise CliError(f"Kubernetes {e}", CliExit.BAD_INPUT) from None
    try:
        return render_manifests_yaml(job_spec, job_id, settings)
    except (K8sBackendError, ValueError) as e:  # the spec cannot run on Kubernetes as written
        raise CliError(f"cannot render {what} for Kubernetes: {e}", CliExit.BAD_INPUT) from e
