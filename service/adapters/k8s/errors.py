"""What the Kubernetes adapter raises. The job service maps these (they say what to do next).

Kept in the adapter because the domain must not depend on Kubernetes; each wraps the API error
it came from (`raise LaunchFailed(...) from e`), so the cause is never lost.
"""

from __future__ import annotations


class K8sBackendError(Exception):
    """Base class: the Kubernetes backend could not do what was asked."""


class ManifestError(K8sBackendError, ValueError):
    """The spec or settings cannot be turned into a valid manifest (a user or operator error)."""


class UnsupportedAccelerator(ManifestError):
    """The spec asks for a TPU type the accelerator table does not know."""


class LaunchFailed(K8sBackendError):
    """Creating the workload failed after retries, or hit a non-transient API error."""


class WorkloadConflict(LaunchFailed):
    """An object with the job's deterministic name exists but belongs to another job."""


class ApiUnavailable(K8sBackendError):
    """The API server kept failing with transient errors until the retry budget ran out."""
