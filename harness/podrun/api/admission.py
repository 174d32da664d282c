"""The API server's admission in front of kmock's store: mutating webhooks, failurePolicy Fail, and dryRun.

kmock stores every create before any reaction runs and knows neither webhooks nor `?dryRun=All`. A real API
server, for a create: calls the mutating webhooks whose rules match (configurations sorted by name:
k8s.io/apiserver pkg/admission/configuration/mutating_webhook_manager.go), and when one cannot be reached and
its failurePolicy is Fail answers 500 InternalError without storing anything (pkg/admission/plugin/webhook/
mutating/dispatcher.go: `failed calling webhook "NAME": failed to call webhook: Post "URL": <cause>`; the cause
for a Service without ready endpoints is `no endpoints available for service "NAME"`); with dryRun=All it runs
admission (webhooks with sideEffects None are called) and returns the object it would have stored, storing
nothing and sending no watch event.

    admission = install_admission(kmock)                 # once per kmock; EmulatedCluster does it
    admission.down.add("kueue-webhook-service")          # Kueue's controller is down: no endpoints
    admission.mutators.append(kueue.default_on_create)   # what a running webhook does to the object

Webhooks emulated: Kueue v0.19.2's mjob.kb.io and mjobset.kb.io (config/components/webhook/manifests.yaml,
failurePolicy Fail, namespaceSelector NotIn kube-system/kueue-system from the kustomization's replacement) and
JobSet v0.12.0's mjobset.kb.io (config/components/webhook/manifests.yaml, service jobset-webhook-service in
jobset-system). Validating webhooks run after the mutating ones and fail the same way when down, so with a
controller down its mutating webhook is the one named. Pod webhooks are not emulated.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web
import kmock as kmock_lib

from .kapi import now_iso

KUEUE_WEBHOOK_SERVICE = "kueue-webhook-service"
JOBSET_WEBHOOK_SERVICE = "jobset-webhook-service"


@dataclass(frozen=True)
class Webhook:
    configuration: str  # the MutatingWebhookConfiguration's name (the call order)
    name: str
    group: str
    plural: str
    service: str
    service_namespace: str
    path: str
    skip_namespaces: tuple[str, ...] = ()

    def url(self) -> str:
        return f"https://{self.service}.{self.service_namespace}.svc:443{self.path}?timeout=10s"  # timeoutSeconds unset: 10


_KUEUE_SKIPS = ("kube-system", "kueue-system")
WEBHOOKS = sorted(
    (
        Webhook(
            "kueue-mutating-webhook-configuration",
            "mjob.kb.io",
            "batch",
            "jobs",
            KUEUE_WEBHOOK_SERVICE,
            "kueue-system",
            "/mutate-batch-v1-job",
            _KUEUE_SKIPS,
        ),
        Webhook(
            "kueue-mutating-webhook-configuration",
            "mjobset.kb.io",
            "jobset.x-k8s.io",
            "jobsets",
            KUEUE_WEBHOOK_SERVICE,
            "kueue-system",
            "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
            _KUEUE_SKIPS,
        ),
        Webhook(
            "jobset-mutating-webhook-configuration",
            "mjobset.kb.io",
            "jobset.x-k8s.io",
            "jobsets",
            JOBSET_WEBHOOK_SERVICE,
            "jobset-system",
            "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        ),
    ),
    key=lambda w: w.configuration,
)


def webhook_error(webhook: Webhook) -> dict[str, Any]:
    """The Status a create gets when the webhook's Service has no endpoints (apierrors.NewInternalError)."""
    cause = (
        f'failed calling webhook "{webhook.name}": failed to call webhook: Post "{webhook.url()}": '
        f'no endpoints available for service "{webhook.service}"'
    )
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {cause}",
        "reason": "InternalError",
        "details": {"causes": [{"message": cause}]},
        "code": 500,
    }


Mutator = Callable[[dict[str, Any]], None]  # what a webhook does to a created object, in place (it is up)


@dataclass
class Admission:
    down: set[str] = field(default_factory=set)  # webhook Services without endpoints
    mutators: dict[str, list[Mutator]] = field(default_factory=dict)  # webhook service -> what it does when up

    def admit(self, plural: str, group: str, namespace: str | None, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Run the mutating webhooks on a create, in place; the error Status when one is down."""
        for webhook in WEBHOOKS:
            if (webhook.group, webhook.plural) != (group, plural) or namespace in webhook.skip_namespaces:
                continue
            if webhook.service in self.down:
                return webhook_error(webhook)
            for mutate in self.mutators.get(webhook.service, []):
                if webhook.plural in ("jobs", "jobsets"):
                    mutate(obj)
        return None


def install_admission(kmock: Any) -> Admission:
    """Put admission in front of this kmock's store (once; later calls return the same Admission).

    kmock's emulator is a slotted attrs class: the instance's class is swapped for a subclass (no new slots)
    whose _handle admits creates before kmock stores them."""
    existing = getattr(type(kmock), "admission", None)
    if isinstance(existing, Admission):
        return existing
    admission = Admission()
    base = type(kmock)

    async def _handle(self: Any, request: Any) -> Any:
        if request.resource is not None and request.action == kmock_lib.action.CREATE:
            if not isinstance(request.data, dict):
                return await base._handle(self, request)
            namespace = request.namespace or (request.data.get("metadata") or {}).get("namespace")
            refused = admission.admit(request.resource.plural, request.resource.group or "", namespace, request.data)
            if refused is not None:
                return aiohttp.web.json_response(refused, status=500)
            if request.params.get("dryRun") == "All":
                obj = copy.deepcopy(request.data)
                key = (request.resource, namespace, (obj.get("metadata") or {}).get("name"))
                if key in self.objects and not self.objects[key].deleted:
                    return aiohttp.web.json_response(_conflict(request.resource.plural, key[2]), status=409)
                meta = obj.setdefault("metadata", {})
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", now_iso())
                return aiohttp.web.json_response(obj, status=201)
        return await base._handle(self, request)

    kmock.__class__ = type(f"Admitting{base.__name__}", (base,), {"__slots__": (), "admission": admission, "_handle": _handle})
    return admission


def _conflict(plural: str, name: str | None) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{plural} "{name}" already exists',
        "reason": "AlreadyExists",
        "code": 409,
    }
