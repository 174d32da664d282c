"""Each domain error has one home (service/domain/records/errors.py): an adapter raises the domain's class."""

from __future__ import annotations

from service.adapters import k8s
from service.adapters.k8s.errors import K8sBackendError, WorkloadConflict
from service.domain.records import errors


def test_there_is_one_launch_failed_and_the_kubernetes_conflict_is_one() -> None:
    assert k8s.LaunchFailed is errors.LaunchFailed
    assert issubclass(WorkloadConflict, errors.LaunchFailed) and issubclass(WorkloadConflict, K8sBackendError)
