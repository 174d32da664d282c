"""Cluster-scoped reads through the launcher's K8sClient (its retry loop and request timeout)."""

from __future__ import annotations

from typing import Any, cast

from kubernetes.client import AuthorizationV1Api, CoreV1Api, V1Node
from kubernetes.client.exceptions import ApiException

from service.adapters.k8s.client import K8sClient, api_status
from service.adapters.k8s.errors import K8sBackendError
from service.adapters.k8s.kueue import KUEUE_GROUP, KUEUE_VERSION


class ClusterReads:
    def __init__(self, client: K8sClient) -> None:
        self.client = client
        api = client.custom.api_client
        self._authz, self._core = AuthorizationV1Api(api), CoreV1Api(api)

    def kueue_object(self, plural: str, name: str) -> dict[str, Any]:
        """A cluster-scoped Kueue object (clusterqueues, resourceflavors, admissionchecks); raises ApiException."""
        obj = self.client.call(
            f"read {plural}.{KUEUE_GROUP} {name}", self.client.custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, plural, name
        )
        return cast(dict[str, Any], obj)

    def config_map_data(self, namespace: str, name: str) -> dict[str, str]:
        """A ConfigMap's data in any namespace (Kueue's kueue-system/kueue-manager-config); raises ApiException."""
        cm = self.client.call(f"read ConfigMap {namespace}/{name}", self._core.read_namespaced_config_map, name, namespace)
        return dict(cm.data or {})

    def namespace_labels(self, name: str) -> tuple[dict[str, str], str]:
        """The Namespace's labels, and a note when they could not be read (then only kubernetes.io/metadata.name,
        which the API server puts on every Namespace, is known)."""
        try:
            ns = self.client.call(f"read Namespace {name}", self._core.read_namespace, name)
        except (ApiException, K8sBackendError) as exc:
            return {"kubernetes.io/metadata.name": name}, f" (its labels unread: {api_status(exc) or exc.__class__.__name__})"
        return {**((ns.metadata.labels if ns.metadata else None) or {}), "kubernetes.io/metadata.name": name}, ""

    def served_group_versions(self) -> set[str]:
        """Every group/version the API server serves under /apis (batch/v1, kueue.x-k8s.io/v1beta2, ...).

        GET /apis as kubectl asks it (ApisApi.get_api_versions asks /apis/, which some servers do not route)."""
        data = self.client.call("discover API groups", self._get_json, "/apis")
        return {str(v.get("groupVersion")) for g in data.get("groups") or [] for v in g.get("versions") or []}

    def _get_json(self, path: str, **kwargs: Any) -> dict[str, Any]:
        api = self.client.custom.api_client
        request = api.param_serialize(
            method="GET", resource_path=path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
        )
        response = api.call_api(*request, _request_timeout=kwargs.get("_request_timeout"))
        response.read()
        data = api.response_deserialize(response, {"200": "object"}).data
        if not isinstance(data, dict):
            raise ValueError(f"GET {path}: expected an object, got {type(data).__name__}")
        return cast(dict[str, Any], data)

    def nodes_with(self, labels: dict[str, str]) -> list[V1Node]:
        """Nodes carrying all these labels (selected server-side, checked again here)."""
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        nodes = self.client.call(f"list nodes {selector}", self._core.list_node, label_selector=selector).items or []
        return [n for n in nodes if all((((n.metadata.labels if n.metadata else None) or {}).get(k) == v) for k, v in labels.items())]

    def allowed(self, group: str, resource: str, verb: str, *, namespace: str | None, name: str | None = None) -> tuple[bool, str]:
        """A SelfSubjectAccessReview: may this identity do it? (allowed, the authorizer's reason)."""
        subresource = None
        if "/" in resource:
            resource, subresource = resource.split("/", 1)
        attrs: dict[str, Any] = {"group": group, "resource": resource, "verb": verb}
        for key, value in (("namespace", namespace), ("name", name), ("subresource", subresource)):
            if value:
                attrs[key] = value
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": attrs}}
        review = self.client.call(f"may I {verb} {resource}", self._authz.create_self_subject_access_review, body)
        status = review.status
        return bool(status and status.allowed), str((status.reason or status.evaluation_error or "") if status else "")
