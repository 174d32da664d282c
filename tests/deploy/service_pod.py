"""Running the rendered service Deployment on the emulated cluster (harness/podrun): the objects of an
overlay as `kubectl apply` would create them, the Secrets docs/deploy-gke.md tells the operator to
create, and the Deployment's pod as its ReplicaSet would create it."""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.request
from typing import Any

from harness.podrun.api.kapi import KINDS
from tests.deploy.deploy_support import ROOT

DOC = (ROOT / "docs" / "deploy-gke.md").read_text()
_SECRET_CMD = re.compile(r"create secret generic (\S+)\s*(?:\\\s*)?--from-literal=(\w+)=")


def documented_secrets() -> dict[str, str]:
    """Secret name -> key, from the guide's `kubectl create secret generic NAME --from-literal=KEY=...`."""
    return dict(_SECRET_CMD.findall(DOC))


def secret(name: str, namespace: str, key: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": {key: value},
    }


def applicable(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What `kubectl apply` of the overlay creates, less the Deployment (its pod is made by hand below) and
    the Namespace (kmock's namespaces exist implicitly)."""
    return [o for o in objs if o["kind"] in KINDS and o["kind"] not in ("Deployment", "Namespace")]


def pod_from_deployment(dep: dict[str, Any]) -> dict[str, Any]:
    template = dep["spec"]["template"]
    template_hash = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
    name = f"{dep['metadata']['name']}-{template_hash}"
    labels = {**template["metadata"].get("labels", {}), "pod-template-hash": template_hash}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-x7k2p",
            "namespace": dep["metadata"]["namespace"],
            "labels": labels,
            "annotations": template["metadata"].get("annotations", {}),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": "replicaset-uid", "controller": True}],
        },
        "spec": template["spec"],
    }


def http_json(port: int, path: str, *, token: str | None = None, body: Any = None) -> tuple[int, Any]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        method="POST" if body is not None else "GET",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


_VERBS = {"LIST": "list", "WATCH": "watch", "FETCH": "get", "CREATE": "create", "UPDATE": "patch", "DELETE": "delete"}


def rbac_rules_used(requests: Any, user_agent_prefix: str = "OpenAPI-Generator/") -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of each API request the kubernetes client made (kmock's request log),
    as the API server's authorizer would check them; discovery and the emulator's own requests excluded."""
    rules = set()
    for req in list(requests):
        if req.resource is None or not (req.headers.get("User-Agent") or "").startswith(user_agent_prefix):
            continue
        action = req.action.value if hasattr(req.action, "value") else str(req.action)
        resource = req.resource.plural + (f"/{req.subresource}" if req.subresource else "")
        verb = "update" if action == "UPDATE" and str(req.method).upper().endswith("PUT") else _VERBS[action]
        rules.add((req.resource.group or "", resource, verb))
    return rules
