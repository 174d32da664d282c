"""The Kubernetes backend: TPU Jobs (single-host) and JobSets (multi-host) on GKE.

Entry points: `build_k8s_launcher(settings)` for the service, `render_manifests[_yaml]` for the CLI.
Submodules import the kubernetes client; importing this package does not load a kubeconfig.
"""

from service.domain.records.errors import LaunchFailed  # the domain's: what the adapter raises when a launch fails

from .accelerators import ACCELERATORS, GkeTpuSlice, lookup_accelerator
from .errors import (
    ApiUnavailable,
    K8sBackendError,
    ManifestError,
    UnsupportedAccelerator,
    WorkloadConflict,
)
from .settings import K8sSettings

__all__ = [
    "ACCELERATORS",
    "ApiUnavailable",
    "GkeTpuSlice",
    "K8sBackendError",
    "K8sSettings",
    "LaunchFailed",
    "ManifestError",
    "UnsupportedAccelerator",
    "WorkloadConflict",
    "lookup_accelerator",
]
