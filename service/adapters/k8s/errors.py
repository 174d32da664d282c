"""What the Kubernetes adapter raises. The job service records a failed launch's message on the job,
so each says what to do next.

Kept in the adapter because the domain must not depend on Kubernetes, except LaunchFailed: that is the
domain's own (service/domain/records/errors.py), shared with the local launcher. Each wraps the API error it
came from (`raise LaunchFailed(...) from e`), so the cause is never lost.
"""

from __future__ import annotations

from service.domain.records.errors import LaunchFailed


class K8sBackendError(Exception):
    """Base class: the Kubernetes backend could not do what was asked."""


class ManifestError(K8sBackendError, ValueError):
    """The spec or settings cannot be turned into a valid manifest (a user or operator error)."""


class UnsupportedAccelerator(ManifestError):
    """The spec asks for a TPU type the accelerator table does not know."""


class WorkloadConflict(LaunchFailed, K8sBackendError):
    """An object with the job's deterministic name exists but belongs to another job."""


class ApiUnavailable(K8sBackendError):
    """The API server kept failing with transient errors until the retry budget ran out."""
