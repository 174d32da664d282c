"""Kueue's manager Configuration for the emulator (kubernetes-sigs/kueue v0.19.2), pure: which Jobs and
JobSets Kueue manages at all, and what its job webhook does to one on create.

    config = KueueConfiguration.installed()          # what the released manifests install (the default)
    config = KueueConfiguration.from_yaml(text)      # a controller_manager_config.yaml, upstream's defaults applied
    KueueEmulator(config=config)

Three rules a cluster's Configuration decides, each cited where it is applied:
- integrations.frameworks: a kind whose framework is not listed gets no Workload (its reconciler is not set
  up) and its webhook is a no-op (jobframework/base_webhook.go SetupNoopWebhook);
- managedJobsNamespaceSelector: since v0.19 always respected (feature gate
  ManagedJobsNamespaceSelectorAlwaysRespected, GA and locked on in 0.19: pkg/features/kube_features.go), so a
  queued Job in a namespace the selector does not match is never reconciled (no Workload), though the
  webhook still suspends it (utils.go WorkloadShouldBeSuspended: a queue-name label suspends);
- the LocalQueue named `default`: the job webhook labels every Job without a queue-name label with it
  (jobframework/defaults.go ApplyDefaultLocalQueueWithManagedJobsNamespaceSelector; the LocalQueueDefaulting
  gate that once governed it went GA in 0.17 and was removed in 0.19, PR #12459: always on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from .podsready import WaitForPodsReady

KUEUE_SYSTEM = "kueue-system"  # apis/config/v1beta2/defaults.go DefaultNamespace
MANAGER_CONFIGMAP = "kueue-manager-config"  # config/components/manager/kustomization.yaml (namePrefix kueue-)
MANAGER_CONFIG_KEY = "controller_manager_config.yaml"
DEFAULT_LOCAL_QUEUE = "default"  # pkg/controller/constants DefaultLocalQueueName
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # the API server puts it on every Namespace
JOB_FRAMEWORK = "batch/job"  # pkg/controller/jobs/job FrameworkName; defaults.go defaultJobFrameworkName
JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"  # pkg/controller/jobs/jobset FrameworkName
FRAMEWORK_OF = {"Job": JOB_FRAMEWORK, "JobSet": JOBSET_FRAMEWORK}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# config/components/manager/controller_manager_config.yaml v0.19.2: the frameworks the released manifests enable.
INSTALLED_FRAMEWORKS = (
    "batch/job",
    "kubeflow.org/mpijob",
    "ray.io/rayjob",
    "ray.io/raycluster",
    "ray.io/rayservice",
    "jobset.x-k8s.io/jobset",
    "workload.codeflare.dev/appwrapper",
    "trainer.kubeflow.org/trainjob",
    "pod",
    "deployment",
    "statefulset",
    "leaderworkerset.x-k8s.io/leaderworkerset",
)


def _default_selector(namespace: str) -> dict[str, Any]:
    """apis/config/v1beta2/defaults.go SetDefaults_Configuration: every namespace but kube-system and Kueue's."""
    return {"matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": ["kube-system", namespace]}]}


@dataclass(frozen=True)
class KueueConfiguration:
    """The fields of config.kueue.x-k8s.io/v1beta2 Configuration the emulator applies."""

    namespace: str = KUEUE_SYSTEM
    manage_jobs_without_queue_name: bool = False  # configuration_types.go: defaults to false
    managed_jobs_namespace_selector: dict[str, Any] = field(default_factory=lambda: _default_selector(KUEUE_SYSTEM))
    frameworks: tuple[str, ...] = INSTALLED_FRAMEWORKS
    # waitForPodsReady, defaulted on in v0.19.2 and v0.20 (kueue/podsready.py), and featureGates (name -> on)
    wait_for_pods_ready: WaitForPodsReady = field(default_factory=WaitForPodsReady)
    feature_gates: tuple[tuple[str, bool], ...] = ()

    @classmethod
    def installed(cls) -> KueueConfiguration:
        return cls()

    @classmethod
    def from_yaml(cls, text: str) -> KueueConfiguration:
        """A controller_manager_config.yaml with SetDefaults_Configuration's defaults: no frameworks -> only
        batch/job; no selector -> _default_selector."""
        doc = yaml.safe_load(text) or {}
        namespace = doc.get("namespace") or KUEUE_SYSTEM
        frameworks = tuple((doc.get("integrations") or {}).get("frameworks") or ()) or (JOB_FRAMEWORK,)
        return cls(
            namespace=namespace,
            manage_jobs_without_queue_name=bool(doc.get("manageJobsWithoutQueueName", False)),
            managed_jobs_namespace_selector=doc.get("managedJobsNamespaceSelector") or _default_selector(namespace),
            frameworks=frameworks,
            wait_for_pods_ready=WaitForPodsReady.from_dict(doc.get("waitForPodsReady")),
            feature_gates=tuple(sorted((str(k), bool(v)) for k, v in (doc.get("featureGates") or {}).items())),
        )

    def to_yaml(self) -> str:
        return yaml.safe_dump(
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "kind": "Configuration",
                "namespace": self.namespace,
                "manageJobsWithoutQueueName": self.manage_jobs_without_queue_name,
                "managedJobsNamespaceSelector": self.managed_jobs_namespace_selector,
                "integrations": {"frameworks": list(self.frameworks)},
                **({"featureGates": dict(self.feature_gates)} if self.feature_gates else {}),
            },
            sort_keys=False,
        )

    def configmap(self) -> dict[str, Any]:
        """The ConfigMap the manager reads its Configuration from (config/components/manager)."""
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": MANAGER_CONFIGMAP, "namespace": self.namespace},
            "data": {MANAGER_CONFIG_KEY: self.to_yaml()},
        }

    def enabled(self, kind: str) -> bool:
        return FRAMEWORK_OF.get(kind, "") in self.frameworks

    def manages_namespace(self, labels: dict[str, str]) -> bool:
        return selector_matches(self.managed_jobs_namespace_selector, labels)


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """apimachinery metav1.LabelSelectorAsSelector(...).Matches: matchLabels and every matchExpression
    (In, NotIn, Exists, DoesNotExist); a nil selector is handled by the caller (namespaceMatchesSelector: all)."""
    if selector is None:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def namespace_labels(name: str, stored: dict[str, Any] | None) -> dict[str, str]:
    """A Namespace's labels as the API server keeps them: kubernetes.io/metadata.name is always there."""
    labels = dict(((stored or {}).get("metadata") or {}).get("labels") or {})
    labels[NAMESPACE_NAME_LABEL] = name
    return labels


def owner_managed_by_kueue(obj: dict[str, Any], config: KueueConfiguration) -> bool:
    """jobframework/integrationmanager.go IsOwnerManagedByKueueForObject: the controller owner's kind is an
    enabled integration."""
    owner = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    return owner is not None and config.enabled(owner.get("kind", ""))


def default_on_create(obj: dict[str, Any], config: KueueConfiguration, *, default_queue_exists: bool, ns_labels: dict[str, str]) -> None:
    """Kueue's mutating webhook for a Job or JobSet on create (jobframework/base_webhook.go Default and
    jobs/job/job_webhook.go Default), in place: defaults.go ApplyDefaultLocalQueueWithManagedJobsNamespaceSelector
    (queue-name `default` when that LocalQueue exists, the object has no queue-name, its owner is not managed by
    Kueue and the namespace matches the selector), then ApplyDefaultForSuspend (utils.go WorkloadShouldBeSuspended:
    a queue-name suspends; without one only manageJobsWithoutQueueName in a matching namespace does). A kind whose
    framework is not enabled has a no-op webhook (SetupNoopWebhook)."""
    if not config.enabled(obj["kind"]):
        return
    meta = obj.setdefault("metadata", {})
    labels = meta.get("labels") or {}
    owned = owner_managed_by_kueue(obj, config)
    if default_queue_exists and not labels.get(QUEUE_LABEL) and not owned and config.manages_namespace(ns_labels):
        meta["labels"] = {**labels, QUEUE_LABEL: DEFAULT_LOCAL_QUEUE}
    if owned:  # FindAncestorJobManagedByKueue: its ancestor's Workload decides
        return
    queued = bool((meta.get("labels") or {}).get(QUEUE_LABEL))
    if queued or (config.manage_jobs_without_queue_name and config.manages_namespace(ns_labels)):
        obj.setdefault("spec", {})["suspend"] = True


def reconciles(owner: dict[str, Any], config: KueueConfiguration, ns_labels: dict[str, str]) -> bool:
    """jobframework/reconciler.go ReconcileGenericJob's early returns: the framework's reconciler runs at all
    (integrations.frameworks), the namespace matches managedJobsNamespaceSelector (always respected in v0.19),
    and the object has a queue-name (manageJobsWithoutQueueName false) or the option is on."""
    if not config.enabled(owner["kind"]) or not config.manages_namespace(ns_labels):
        return False
    if (owner["metadata"].get("labels") or {}).get(QUEUE_LABEL):
        return True
    if config.manage_jobs_without_queue_name:
        from harness.podrun.pods.volumes import NotEmulated

        raise NotEmulated("manageJobsWithoutQueueName: a Workload without a queue name")
    return False
