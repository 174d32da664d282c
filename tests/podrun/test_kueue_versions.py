"""Where Kueue v0.19.2 and v0.20.0 write different reasons for a Workload that waits, and rljob reading both alike.

The emulator (harness/podrun/kueue/versions.py) writes v0.19.2's Pending/Inadmissible or v0.20.0's WaitingForQuota,
ExceedsMaxQuota, NoMatchingFlavor, Misconfigured and Suspended, with the same message; the service's
normalized_reason (service/adapters/k8s/kueue_reasons.py) must read each v0.19.2 pair as v0.20.0 names it, so a job's
status, the dashboard and the CLI say the same on both versions. Cases after v0.20's scheduler_test.go /
workload_controller_test.go shapes: one flavor short of unused quota, one whose whole quota is too small, one that
matches no flavor, a quota-short flavor beside a mismatched one (the least severe wins), a missing LocalQueue, a
stopped ClusterQueue.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.podrun.kueue.reconcile import KueueState, decide_kueue
from harness.podrun.kueue.versions import VERSIONS
from service.adapters.k8s.kueue_reasons import normalized_reason, reason_words

from .test_kueue_emulator import FLAVORS, NOW, cluster_queue, job, local_queue, workload_of

pytestmark = pytest.mark.timeout(30)


def _running(name: str, cq: str, flavor: str, cpu: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An admitted owner and its Workload holding `cpu` of `flavor`."""
    owner = job(name, requests={"cpu": cpu}, uid=f"u-{name}")
    wl = workload_of(owner)
    wl["status"] = {
        "admission": {
            "clusterQueue": cq,
            "podSetAssignments": [{"name": "main", "flavors": {"cpu": flavor}, "count": 1, "resourceUsage": {"cpu": cpu}}],
        },
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "",
                "lastTransitionTime": "2026-12-01T00:00:00Z",
            }
        ],
    }
    return owner, wl


def _waiting_condition(version: str, case: str) -> dict[str, Any]:
    cq = cluster_queue("cq", ("one", {"cpu": "4"}))
    lqs = [local_queue("team", "cq")]
    owners: list[dict[str, Any]] = []
    workloads: list[dict[str, Any]] = []
    request = "1"
    if case == "quota":
        owner, wl = _running("big", "cq", "one", "4")
        owners, workloads = [owner], [wl]
    elif case == "too-big":
        request = "9"
    elif case == "mismatch-and-quota":
        cq = cluster_queue("cq", ("tainted", {"cpu": "4"}), ("one", {"cpu": "4"}))
        owner, wl = _running("big", "cq", "one", "4")
        owners, workloads = [owner], [wl]
    elif case == "no-queue":
        lqs = []
    elif case == "stopped":
        cq["spec"]["stopPolicy"] = "Hold"
    selector = {"type": "two"} if case == "mismatch" else None
    waiting = job("waiting", requests={"cpu": request}, uid="u-waiting", selector=selector)
    wl = workload_of(waiting)
    state = KueueState(
        flavors=FLAVORS,
        cluster_queues={"cq": cq},
        checks={},
        priority_classes={},
        prov_configs=set(),
        local_queues=lqs,
        workloads=[*workloads, wl],
        owners=[*owners, waiting],
    )
    d = decide_kueue(state, rule="flavor-keys", serves_provisioning=False, now=NOW, version=version)
    (status,) = [s for kind, _, name, s in d.status if kind == "Workload" and name == wl["metadata"]["name"]]
    return next(c for c in status["conditions"] if c["type"] == "QuotaReserved")


CASES = {  # case -> v0.20.0's reason (v0.19.2: Pending for the scheduler's, Inadmissible for the queue's)
    "quota": "WaitingForQuota",
    "too-big": "ExceedsMaxQuota",
    "mismatch": "NoMatchingFlavor",
    "mismatch-and-quota": "WaitingForQuota",
    "no-queue": "Misconfigured",
    "stopped": "Suspended",
}


@pytest.mark.parametrize("case", CASES)
def test_each_version_writes_its_reason_and_rljob_reads_v019s_as_v020_names_it(case):
    old, new = (_waiting_condition(v, case) for v in VERSIONS)
    assert new["reason"] == CASES[case], new
    assert old["reason"] == ("Inadmissible" if case in ("no-queue", "stopped") else "Pending"), old
    assert old["message"] == new["message"], "the versions differ in the reason only"
    assert normalized_reason(old["reason"], old["message"]) == CASES[case], old
    assert normalized_reason(new["reason"], new["message"]) == CASES[case], "v0.20's reasons pass through"


def test_the_words_say_what_to_do_and_keep_kueues_message():
    message = _waiting_condition("v0.20.0", "too-big")["message"]
    words = reason_words("ExceedsMaxQuota", message, "team")
    assert words.startswith("asks for more than LocalQueue team's whole quota") and "submit a smaller slice" in words
    assert words.endswith(f"Kueue: {message}")
    assert reason_words("SomethingNew", "Kueue's words", "team") == "Kueue's words", "an unknown reason: Kueue's message"


def test_v020_defaults_a_queued_job_without_a_class_to_the_default_priority_class():
    """jobframework/defaults.go ApplyDefaultWorkloadPriorityClass: only v0.20 (WorkloadPriorityClassDefaulting on), only
    when a class named `default` exists, never over a class the job names (rljob always names rljob-<priority>)."""
    from harness.podrun.kueue.emulator import KueueEmulator

    class Stored(KueueEmulator):
        def __init__(self, version: str, classes: set[str]) -> None:
            super().__init__(version=version)
            self.classes = classes

        def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
            if kind == "WorkloadPriorityClass":
                return {"metadata": {"name": name}} if name in self.classes else None
            return None

        def namespace_labels(self, namespace: str) -> dict[str, str]:
            return {"kubernetes.io/metadata.name": namespace}

    def label_after_create(version: str, classes: set[str], labels: dict[str, str]) -> str | None:
        owner = job("j", requests={"cpu": "1"}, uid="u", labels=labels)
        Stored(version, classes).default_on_create(owner)
        return owner["metadata"]["labels"].get("kueue.x-k8s.io/priority-class")

    assert label_after_create("v0.20.0", {"default"}, {}) == "default"
    assert label_after_create("v0.19.2", {"default"}, {}) is None
    assert label_after_create("v0.20.0", set(), {}) is None
    named = {"kueue.x-k8s.io/priority-class": "rljob-normal"}
    assert label_after_create("v0.20.0", {"default", "rljob-normal"}, named) == "rljob-normal"
