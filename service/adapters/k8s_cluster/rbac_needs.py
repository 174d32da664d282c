"""Every permission the service uses, in one place: what `rljob doctor` asks the API server about
(SelfSubjectAccessReview), and what k8s/base/rbac.yaml (Role rljob-launcher) and
k8s/overlays/gke-kueue/rbac-cluster-reader.yaml (ClusterRole rljob-cluster-reader) grant;
tests/k8s/test_rbac_needs.py checks the three agree, and that the namespaced ones are exactly what
tests/deploy's scan derives from service/adapters/k8s/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

When = Literal["always", "jobsets", "kueue"]


@dataclass(frozen=True)
class Permission:
    group: str
    resource: str
    verb: str
    when: When = "always"  # jobsets: RLJOB_K8S_WATCH_JOBSETS; kueue: a Kueue queue is configured
    optional: bool = False  # denied: a warning (a nicety is lost), not a failure
    why: str = ""

    @property
    def rule(self) -> tuple[str, str, str]:
        return (self.group, self.resource, self.verb)

    def text(self) -> str:
        return f"{self.verb} {self.resource}{'.' + self.group if self.group else ''}"


def _each(group: str, resource: str, verbs: str, when: When = "always", why: str = "") -> list[Permission]:
    return [Permission(group, resource, verb, when, why=why) for verb in verbs.split()]


# Role rljob-launcher, in the service's namespace.
NAMESPACED: tuple[Permission, ...] = (
    *_each("", "configmaps", "create delete get patch", why="the job spec handed to the trainer"),
    *_each("batch", "jobs", "create delete get list patch watch", why="single-host trainer Jobs"),
    *_each("jobset.x-k8s.io", "jobsets", "create delete get list patch watch", "jobsets", "multi-host trainer JobSets"),
    *_each("", "pods", "list watch", why="why a job waits or failed"),
    Permission("", "pods/log", "get", why="GET /v1/jobs/{id}/logs"),
    Permission("", "events", "list", why="why a pod waits"),
    # resourceNames: only the HF token Secret (RLJOB_K8S_HF_TOKEN_SECRET); the doctor reads its keys.
    Permission("", "secrets", "get", optional=True, why="the doctor checks the HF token Secret has its key"),
    Permission("kueue.x-k8s.io", "workloads", "list", "kueue", why="why Kueue holds a job"),
    Permission("kueue.x-k8s.io", "localqueues", "get", "kueue", why="the submit check's queue chain"),
    Permission("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get", "kueue", True, "place in line"),
)

# ClusterRole rljob-cluster-reader (gke-kueue overlay): cluster-scoped, so no Role can grant them.
CLUSTER: tuple[Permission, ...] = (
    Permission("kueue.x-k8s.io", "clusterqueues", "get", "kueue", True, "the submit check's flavors and quota"),
    Permission("kueue.x-k8s.io", "resourceflavors", "get", "kueue", True, "the submit check's flavors"),
    Permission("kueue.x-k8s.io", "admissionchecks", "get", "kueue", True, "the doctor's admission-check check"),
    Permission("", "nodes", "list", "kueue", True, "the doctor's nodes-per-flavor check"),
)

# Bound to every authenticated user by Kubernetes' default RBAC (ClusterRole system:basic-user, bound to
# system:authenticated: kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go): the doctor's
# own access reviews need no grant of ours.
GRANTED_TO_EVERY_USER: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("authorization.k8s.io", "selfsubjectaccessreviews", "create"),
        ("authorization.k8s.io", "selfsubjectrulesreviews", "create"),
    }
)

HF_SECRET_IN_ROLE = "rljob-hf-token"  # the resourceNames of the Role's secrets rule
