"""Kueue's decisions for the emulated cluster, as pure functions over API dicts: what upstream Kueue
(kubernetes-sigs/kueue v0.19.2, default feature gates;
where v0.20.0 differs, kueue/versions.py) does, not what our service expects. Every rule
names the upstream file and function it follows; kueue/workload.py holds the jobframework half.

Emulated:
- queued Jobs (batch/v1) and JobSets (jobset.x-k8s.io/v1alpha2) get a Workload (kueue/workload.py);
- AdmissionCheck Active: only `kueue.x-k8s.io/provisioning-request` checks have a controller, and only
  when the cluster serves ProvisioningRequest (cmd/kueue/main.go skips the controller otherwise); any
  other check has no controller and never turns Active;
- ClusterQueue Active (missing flavors, missing or inactive admission checks, stopPolicy), LocalQueue
  Active; a Workload of an inactive or missing queue stays Inadmissible;
- flavor assignment (flavorassigner.go): resource groups, flavors in order, taints, nodeLabels against
  the pod's nodeSelector and required node affinity terms under the emulated version's key rule (RULES), nominal quota minus what
  admitted Workloads use, earlier podsets' usage counted; messages as upstream formats them;
- admission: status.admission, QuotaReserved and Admitted (or admission checks left Pending), then the
  owner is started with the flavors' nodeLabels/tolerations merged; quota is released when the owner
  finishes (Finished condition) or the Workload goes;
- queueing: BestEffortFIFO and StrictFIFO by WorkloadPriorityClass priority, then creation time, then UID;
- the manager's Configuration (kueue/config.py): integrations.frameworks, managedJobsNamespaceSelector, the
  `default` LocalQueue and the job webhook's defaulting (admission.py puts it in front of kmock's store);
- a start whose podset merge conflicts finishes the Workload as FailedToStart (kueue/workload.py);
Not emulated (NotEmulated or absent): cohorts and borrowing, preemption (a Workload that needs it stays
pending), fair sharing, partial admission, TAS, MultiKueue, the ProvisioningRequest flow itself (an
active provisioning check stays Pending, so its Workloads are never Admitted), pod PriorityClass as
priority, required nodeAffinity in flavor matching, pod and validating webhooks, the Workloads of
manageJobsWithoutQueueName (NotEmulated), flavor-fungibility knobs other than the defaults, resuming from the last tried flavor,
the v0.20 QuotaReserved reasons and priority-class defaulting are kueue/versions.py's (per emulated version).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from harness.podrun.controllers.job_controller import iso
from harness.podrun.controllers.scheduling import node_selector_terms_match, required_affinity_terms

from .versions import SEVERITY
from .workload import format_quantity, podset_requests, quantity

PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"  # kueue.ProvisioningRequestControllerName
# Which nodeLabels keys a pod's nodeSelector is compared on (flavorassigner.go flavorSelector's allowedKeys):
#  flavor-keys: that flavor's own keys (PR #12449: v0.17.6+, v0.18.2+, v0.19.x; checkFlavorForPodSets);
#  union-keys:  the keys of every flavor in the resource group (<= v0.17.5, v0.18.0-1;
#               pkg/cache/scheduler/clusterqueue.go updateLabelKeys -> ResourceGroup.LabelKeys).
RULES = ("flavor-keys", "union-keys")


def cond(kind: str, status: bool, reason: str, message: str, now: dt.datetime) -> dict[str, Any]:
    return {"type": kind, "status": "True" if status else "False", "reason": reason, "message": message, "lastTransitionTime": iso(now)}


def find(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def is_true(obj: dict[str, Any], kind: str) -> bool:
    c = find(obj, kind)
    return c is not None and c["status"] == "True"


def set_cond(conds: list[dict[str, Any]], new: dict[str, Any]) -> None:
    """apimeta.SetStatusCondition: lastTransitionTime only moves when the status does."""
    old = next((c for c in conds if c["type"] == new["type"]), None)
    if old is not None and old["status"] == new["status"]:
        new = {**new, "lastTransitionTime": old["lastTransitionTime"]}
    conds[:] = [c for c in conds if c["type"] != new["type"]] + [new]


# -- activity ------------------------------------------------------------------------------------------------


def check_condition(check: dict[str, Any], *, serves_provisioning: bool, prov_configs: set[str], now: dt.datetime) -> dict[str, Any] | None:
    """pkg/controller/admissionchecks/provisioning/admissioncheck_reconciler.go Reconcile: the Active condition
    the provisioning controller writes; None where no controller runs for the check (none writes one)."""
    if check["spec"].get("controllerName") != PROVISIONING_CONTROLLER or not serves_provisioning:
        return None
    why = _parameters_error(check["spec"].get("parameters"), prov_configs)
    if why is not None:
        return cond("Active", False, "BadParametersRef", why, now)
    return cond("Active", True, "Active", "The admission check is active", now)


def _parameters_error(ref: dict[str, Any] | None, prov_configs: set[str]) -> str | None:
    """pkg/util/admissioncheck/admissioncheck.go ConfigHelper.ConfigFromRef: refValidForGK (nil, empty name, wrong
    group or kind are errors), then the ProvisioningRequestConfig's Get."""
    if ref is None:
        return "missing parameters reference"  # ErrNilParametersRef
    if not ref.get("name"):
        return "empty name: bad parameters reference"
    if ref.get("apiGroup") != "kueue.x-k8s.io":
        return f'wrong group "{ref.get("apiGroup", "")}", expecting "kueue.x-k8s.io": bad parameters reference'
    if ref.get("kind") != "ProvisioningRequestConfig":
        return f'wrong kind "{ref.get("kind", "")}", expecting "ProvisioningRequestConfig": bad parameters reference'
    if ref["name"] not in prov_configs:
        return f'provisioningrequestconfigs.kueue.x-k8s.io "{ref["name"]}" not found'
    return None


def cluster_queue_checks(cq: dict[str, Any]) -> list[str]:
    return [c["name"] for c in (cq["spec"].get("admissionChecksStrategy") or {}).get("admissionChecks") or []]


def cluster_queue_active(cq: dict[str, Any], flavors: dict[str, Any], checks: dict[str, Any]) -> tuple[bool, str, str]:
    """pkg/cache/scheduler/clusterqueue.go updateQueueStatus + inactiveReason: (active, reason, message)."""
    reasons: list[str] = []
    messages: list[str] = []
    if (cq["spec"].get("stopPolicy") or "None") != "None":
        reasons.append("Stopped")
        messages.append("is stopped")
    missing = [f["name"] for rg in cq["spec"].get("resourceGroups") or [] for f in rg["flavors"] if f["name"] not in flavors]
    if missing:  # updateLabelKeys appends in resource-group order
        reasons.append("FlavorNotFound")
        messages.append(f"references missing ResourceFlavor(s): {','.join(missing)}")
    names = cluster_queue_checks(cq)
    absent = sorted(n for n in names if n not in checks)
    inactive = sorted(n for n in names if n in checks and not is_true(checks[n], "Active"))
    if absent:
        reasons.append("AdmissionCheckNotFound")
        messages.append(f"references missing AdmissionCheck(s): {','.join(absent)}")
    if inactive:
        reasons.append("AdmissionCheckInactive")
        messages.append(f"references inactive AdmissionCheck(s): {','.join(inactive)}")
    if reasons:
        return False, reasons[0], f"Can't admit new workloads: {', '.join(messages)}."
    return True, "Ready", "Can admit new workloads"


def local_queue_active(lq: dict[str, Any], cq: dict[str, Any] | None, cq_active: bool) -> tuple[bool, str, str]:
    """pkg/controller/core/localqueue_controller.go Reconcile's Active condition."""
    if (lq["spec"].get("stopPolicy") or "None") != "None":
        return False, "Stopped", "LocalQueue is stopped"
    if cq is None:
        return False, "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue"
    if not cq_active:
        return False, "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue"
    return True, "Ready", "Can submit new workloads to localQueue"


# -- flavor assignment ---------------------------------------------------------------------------------------


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """k8s.io/api core/v1 Toleration.ToleratesTaint."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        if t.get("operator") == "Exists" or (t.get("key") and t.get("value", "") == taint.get("value", "")):
            return True
    return False


def _taint_text(taint: dict[str, Any]) -> str:
    """Go's %s of a *corev1.Taint (struct fields Key, Value, Effect, TimeAdded), as the message prints it
    (scheduler_test.go: "untolerated taint {key val NoSchedule <nil>} in flavor spot-tainted")."""
    return f"{{{taint['key']} {taint.get('value', '')} {taint['effect']} <nil>}}"


def flavor_mismatch(flavor_name: str, flavor: dict[str, Any] | None, pod_spec: dict[str, Any], allowed_keys: set[str]) -> str | None:
    """flavorassigner.go checkFlavorForPodSets: why the flavor cannot take the podset (None: it can)."""
    if flavor is None:
        return f"flavor {flavor_name} not found"
    spec = flavor.get("spec") or {}
    tolerations = [*(pod_spec.get("tolerations") or []), *(spec.get("tolerations") or [])]
    for taint in spec.get("nodeTaints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, taint):
            return f"untolerated taint {_taint_text(taint)} in flavor {flavor_name}"
    labels = spec.get("nodeLabels") or {}
    if not flavor_selector_matches(pod_spec, allowed_keys, labels):
        return f"flavor {flavor_name} doesn't match node affinity"
    return None


def flavor_selector_matches(pod_spec: dict[str, Any], allowed_keys: set[str], flavor_labels: dict[str, str]) -> bool:
    """flavorassigner.go flavorSelector (v0.19.2) then RequiredNodeAffinity.Match against a node that carries
    only the flavor's nodeLabels: the nodeSelector and each required term's matchExpressions cut to
    `allowed_keys`; a term left empty drops the whole affinity (terms are ORed, so it matches any flavor);
    matchFields are dropped (the copy keeps MatchExpressions only)."""
    selector = {k: v for k, v in (pod_spec.get("nodeSelector") or {}).items() if k in allowed_keys}
    if any(flavor_labels.get(k) != v for k, v in selector.items()):
        return False
    terms = required_affinity_terms(pod_spec)
    if not terms:
        return True
    cut = []
    for term in terms:
        kept = [e for e in term.get("matchExpressions") or [] if e["key"] in allowed_keys]
        if not kept:
            return True  # termsCopy = nil: matching reduces to the nodeSelector
        cut.append({"matchExpressions": kept})
    return node_selector_terms_match(cut, flavor_labels)


def _quotas(cq: dict[str, Any]) -> dict[tuple[str, str], Decimal]:
    return {
        (f["name"], r["name"]): quantity(r["nominalQuota"])
        for rg in cq["spec"].get("resourceGroups") or []
        for f in rg["flavors"]
        for r in f["resources"]
    }


@dataclass
class Assignment:
    pod_sets: list[dict[str, Any]] = field(default_factory=list)  # status.admission.podSetAssignments
    usage: dict[tuple[str, str], Decimal] = field(default_factory=dict)  # (flavor, resource) -> quantity
    message: str = ""  # Assignment.Message() when something did not fit
    no_fit_reason: str = ""  # v0.20's NoFitReason for it (kueue/versions.py says when a version writes it)


def assign_flavors(
    workload: dict[str, Any], cq: dict[str, Any], flavors: dict[str, dict[str, Any]], used: dict[tuple[str, str], Decimal], rule: str
) -> Assignment:
    """flavorassigner.go assignFlavors + findFlavorForPodSets + fitsResourceQuota, without borrowing or
    preemption: a flavor short of unused quota is tried past (FlavorFungibility whenCanPreempt TryNextFlavor),
    and a podset no flavor takes fails with every flavor's reasons, sorted (Status.Message)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}")
    groups = cq["spec"].get("resourceGroups") or []
    quotas = _quotas(cq)
    out = Assignment()
    for ps in workload["spec"]["podSets"]:
        requests = podset_requests(ps)
        if any("pods" in rg["coveredResources"] for rg in groups):  # assignFlavors counts pods when quota'd
            requests["pods"] = Decimal(int(ps.get("count", 1)))
        chosen: dict[str, str] = {}
        reasons: list[str] = []
        for res in sorted(requests):  # upstream walks its Requests container; sorted here, so messages are stable
            if res in chosen:
                continue
            rg = next((g for g in groups if res in g["coveredResources"]), None)
            if rg is None:
                if requests[res] == 0:
                    continue
                reasons = [f"resource {res} unavailable in ClusterQueue"]
                out.no_fit_reason = "NoMatchingFlavor"  # no flavor attempt at all: resolveNoFitReason's default
                break
            covered = {r: q for r, q in requests.items() if r in rg["coveredResources"]}
            tried: list[str] = []  # each flavor's NoFitReason (flavorassigner.go: NoMatchingFlavor, or fitsResourceQuota's)
            union = {k for f in rg["flavors"] for k in ((flavors.get(f["name"]) or {}).get("spec", {}).get("nodeLabels") or {})}
            found = None
            for f in rg["flavors"]:
                name = f["name"]
                own = set(((flavors.get(name) or {}).get("spec") or {}).get("nodeLabels") or {})
                why = flavor_mismatch(name, flavors.get(name), ps["template"]["spec"], own if rule == "flavor-keys" else union)
                if why is not None:
                    reasons.append(why)
                    tried.append("NoMatchingFlavor")
                    continue
                short = _quota_reasons(name, covered, quotas, used, out.usage)
                reasons += short
                if short:
                    tried.append("ExceedsMaxQuota" if any("maximum capacity" in r for r in short) else "WaitingForQuota")
                else:
                    found = name
                    break
            if found is None:
                # resolveNoFitReason: within a resource group the least severe flavor's reason stands
                out.no_fit_reason = min(tried, key=SEVERITY.__getitem__, default="NoMatchingFlavor")
                break
            chosen.update({r: found for r in covered})
        else:
            for res, flavor in chosen.items():
                out.usage[(flavor, res)] = out.usage.get((flavor, res), Decimal(0)) + requests[res]
            out.pod_sets.append(
                {
                    "name": ps["name"],
                    "flavors": dict(sorted(chosen.items())),
                    "count": int(ps.get("count", 1)),
                    "resourceUsage": {r: format_quantity(q, r) for r, q in sorted(requests.items())},
                }
            )
            continue
        out.message = f"couldn't assign flavors to pod set {ps['name']}: {', '.join(sorted(reasons))}"
        out.pod_sets = []
        return out
    return out


def _quota_reasons(
    flavor: str,
    covered: dict[str, Decimal],
    quotas: dict[tuple[str, str], Decimal],
    used: dict[tuple[str, str], Decimal],
    assumed: dict[tuple[str, str], Decimal],
) -> list[str]:
    """fitsResourceQuota's messages; maximum capacity is the nominal quota (no cohort here)."""
    out = []
    for res, q in sorted(covered.items()):
        nominal = quotas.get((flavor, res), Decimal(0))
        before = assumed.get((flavor, res), Decimal(0))
        val = before + q
        available = nominal - used.get((flavor, res), Decimal(0))
        if val > nominal:
            out.append(
                f"insufficient quota for {res} in flavor {flavor}, previously considered podsets requests "
                f"({format_quantity(before, res)}) + current podset request ({format_quantity(q, res)}) > "
                f"maximum capacity ({format_quantity(nominal, res)})"
            )
        elif val > available:
            out.append(f"insufficient unused quota for {res} in flavor {flavor}, {format_quantity(val - available, res)} more needed")
    return out


def usage_of(workload: dict[str, Any]) -> dict[tuple[str, str], Decimal]:
    """What an admitted Workload holds in its ClusterQueue (the cache's usage, from status.admission)."""
    out: dict[tuple[str, str], Decimal] = {}
    for psa in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        for res, flavor in (psa.get("flavors") or {}).items():
            q = quantity((psa.get("resourceUsage") or {}).get(res, 0))
            out[(flavor, res)] = out.get((flavor, res), Decimal(0)) + q
    return out


def holds_quota(workload: dict[str, Any]) -> bool:
    return is_true(workload, "QuotaReserved") and not is_true(workload, "Finished") and not workload["metadata"].get("deletionTimestamp")


def queue_order(workloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """pkg/cache/queue/cluster_queue.go queueOrderingFunc -> baseCompareFunc (no admission fair sharing, no
    sticky workload): higher priority first, then the older queue-order timestamp (creation time under the
    default ordering), then the smaller UID."""
    return sorted(
        workloads,
        key=lambda w: (
            -int(w["spec"].get("priority") or 0),
            w["metadata"].get("creationTimestamp") or "",
            w["metadata"].get("uid") or "",
        ),
    )
