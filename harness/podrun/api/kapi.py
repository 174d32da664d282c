"""Reading and writing the emulated API (kmock) from the controllers' event loop.

Reads come straight from kmock's object store (the controllers share its event loop); every write goes
through its HTTP API, so watches, 404/409 and finalizer handling behave as they do for any client.
"""

from __future__ import annotations

import copy
import datetime as dt
import uuid
from typing import Any, cast

# kind -> (API group/version, plural, namespaced)
KINDS: dict[str, tuple[str, str]] = {
    "Pod": ("v1", "pods"),
    "Event": ("v1", "events"),
    "ConfigMap": ("v1", "configmaps"),
    "Secret": ("v1", "secrets"),
    "Service": ("v1", "services"),
    "ServiceAccount": ("v1", "serviceaccounts"),
    "Job": ("batch/v1", "jobs"),
    "JobSet": ("jobset.x-k8s.io/v1alpha2", "jobsets"),
    "Deployment": ("apps/v1", "deployments"),
    "Role": ("rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings"),
    "PodDisruptionBudget": ("policy/v1", "poddisruptionbudgets"),
    "Namespace": ("v1", "namespaces"),
}
CLUSTER_SCOPED = {"Namespace"}  # kmock cannot store these: namespaces exist implicitly there


def register_resources(kmock: Any) -> None:
    for group_version, plural in KINDS.values():
        kmock.resources[f"{group_version}/{plural}"] = {"namespaced": True, "verbs": ["list", "watch", "get", "create", "patch", "delete"]}


def collection_path(kind: str, namespace: str | None) -> str:
    group_version, plural = KINDS[kind]
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    return f"{base}/{plural}" if kind in CLUSTER_SCOPED or namespace is None else f"{base}/namespaces/{namespace}/{plural}"


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"{status}: {body}")
        self.status = status


class KApi:
    def __init__(self, kmock: Any) -> None:
        self.kmock = kmock

    async def send(self, method: str, path: str, body: Any = None) -> Any:
        """The decoded JSON answer (kmock's client is untyped; callers that know the shape cast it)."""
        async with self.kmock.request(method, path, json=body) as resp:
            data = await resp.json(content_type=None)
            if resp.status >= 300:
                raise ApiError(resp.status, data)
            return data

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        ns = obj["metadata"].get("namespace")
        return cast(dict[str, Any], await self.send("POST", collection_path(obj["kind"], ns), obj))

    async def patch(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return cast(dict[str, Any], await self.send("PATCH", f"{collection_path(kind, namespace)}/{name}", body))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def delete(self, kind: str, namespace: str, name: str) -> bool:
        try:
            await self.send("DELETE", f"{collection_path(kind, namespace)}/{name}", {"propagationPolicy": "Background"})
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        return True

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        group_version, plural = KINDS[kind]
        group, _, version = group_version.rpartition("/")
        out = []
        for (res, ns, _name), obj in list(self.kmock.objects.items()):
            if res.plural != plural or (res.group or "") != group or res.version != version or obj.deleted:
                continue
            if namespace is None or ns == namespace:
                out.append(copy.deepcopy(obj.raw))
        return out

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return next((o for o in self.list(kind, namespace) if o["metadata"]["name"] == name), None)

    async def event(
        self, involved: dict[str, Any], kind: str, reason: str, message: str, type_: str = "Normal", component: str = "podrun"
    ) -> None:
        meta = involved["metadata"]
        await self.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
                "involvedObject": {"kind": kind, "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
                "reason": reason,
                "message": message,
                "type": type_,
                "count": 1,
                "firstTimestamp": now_iso(),
                "lastTimestamp": now_iso(),
                "source": {"component": component},
            }
        )
