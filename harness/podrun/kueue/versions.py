"""Where Kueue v0.19.2 and v0.20.0 decide differently in what the emulator does, one rule per function.

Read in kubernetes-sigs/kueue: v0.19.2 at its tag; v0.20's behaviour from CHANGELOG/CHANGELOG-0.20.md (the v0.20.0
notes) and the code it describes as on main after the v0.20.0-devel tag (the stored mirror has no v0.20.0 tag):
- UnadmittedWorkloadsObservability, Beta, default false in v0.19 and true in v0.20 (pkg/features/kube_features.go;
  CHANGELOG-0.20 #13063). Off, a Workload that cannot reserve quota says reason Pending (scheduler.go
  requeueAndUpdate) and one whose queue is missing or inactive says Inadmissible (workload_controller.go
  resolveLegacyUnadmittedQuotaReservedCondition). On, the scheduler writes the assignment's NoFitReason
  (flavorassigner.go resolveNoFitReason: per resource group the least severe flavor, across groups the most severe;
  severity WaitingForQuota < ExceedsMaxQuota < NoMatchingFlavor) and the workload controller getQueueBlocker's
  reason (a missing LocalQueue or ClusterQueue: Misconfigured; an inactive one: Suspended). Messages are unchanged.
- WorkloadPriorityClassDefaulting, Alpha off in v0.18/v0.19, Beta on in v0.20 (kube_features.go; CHANGELOG-0.20
  #13719): jobframework/defaults.go ApplyDefaultWorkloadPriorityClass labels a queued job that names no
  WorkloadPriorityClass with `default` when a WorkloadPriorityClass of that name exists.
"""

from __future__ import annotations

VERSIONS = ("v0.19.2", "v0.20.0")

# flavorassigner.go reasonSeverity (v0.20): a higher number is the more severe, and so the reported, reason.
SEVERITY = {"WaitingForQuota": 2, "ExceedsMaxQuota": 3, "NoMatchingFlavor": 4}
DEFAULT_PRIORITY_CLASS = "default"  # pkg/controller/constants DefaultWorkloadPriorityClassName


def check(version: str) -> str:
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}")
    return version


def observability(version: str) -> bool:
    """UnadmittedWorkloadsObservability at its default."""
    return check(version) != "v0.19.2"


def no_fit_reason(version: str, v020_reason: str) -> str:
    """The QuotaReserved=False reason of a Workload no flavor takes (v0.20's NoFitReason, else Pending)."""
    return v020_reason if observability(version) else "Pending"


def blocker_reason(version: str, message: str) -> str:
    """The QuotaReserved=False reason for getQueueBlocker's message ("... doesn't exist" / "... is inactive")."""
    if not observability(version):
        return "Inadmissible"
    return "Misconfigured" if message.endswith("doesn't exist") else "Suspended"


def defaults_priority_class(version: str) -> bool:
    """WorkloadPriorityClassDefaulting at its default."""
    return check(version) != "v0.19.2"
