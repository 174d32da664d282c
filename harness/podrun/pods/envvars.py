"""A container's environment, resolved as the kubelet does; pure functions over plain API dicts.

Precedence, lowest first: the image's ENV, HOSTNAME, service links (`enableServiceLinks`) and the
`kubernetes` service, `envFrom` sources in order, then `env` in order. `$(VAR)` in a value expands to
a variable defined before it (`$$` escapes). A reference that cannot be resolved fails container
creation with the kubelet's message (CreateContainerConfigError), unless it is `optional: true`.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .quantity import parse_quantity

# (kind, name) -> the object in the pod's namespace, or None when it does not exist.
Lookup = Callable[[str, str], dict[str, Any] | None]
POD_IP = "127.0.0.1"  # every pod shares this machine's loopback: there is no pod network
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_META_KEY = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class ContainerConfigError(Exception):
    """The kubelet cannot build the container's config: CreateContainerConfigError, pod stays Pending."""

    reason = "CreateContainerConfigError"


@dataclass(frozen=True)
class ApiAccess:
    """How pods reach the emulated API server: what in-cluster clients read (env, token, CA)."""

    host: str
    port: int
    ca_pem: bytes
    token: str


def secret_data(secret: dict[str, Any]) -> dict[str, bytes]:
    """A Secret's values: `data` is base64, `stringData` is what the API server would have folded into it."""
    out = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    out.update({k: v.encode() for k, v in (secret.get("stringData") or {}).items()})
    return out


def configmap_data(cm: dict[str, Any]) -> dict[str, bytes]:
    out = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
    out.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    return out


def source_values(kind: str, name: str, lookup: Lookup, namespace: str, *, optional: bool) -> dict[str, bytes] | None:
    """All keys of a Secret/ConfigMap; None if it is missing and optional; raises if missing and required."""
    obj = lookup(kind, name)
    if obj is None:
        if optional:
            return None
        raise ContainerConfigError(f'{kind.lower()} "{name}" not found')
    return secret_data(obj) if kind == "Secret" else configmap_data(obj)


def key_value(kind: str, ref: dict[str, Any], lookup: Lookup, namespace: str) -> str | None:
    optional = bool(ref.get("optional"))
    values = source_values(kind, ref["name"], lookup, namespace, optional=optional)
    if values is None:
        return None
    if ref["key"] not in values:
        if optional:
            return None
        raise ContainerConfigError(f"couldn't find key {ref['key']} in {kind} {namespace}/{ref['name']}")
    return values[ref["key"]].decode()


def field_value(pod: dict[str, Any], path: str) -> str:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.hostIP": POD_IP,
        "status.podIP": POD_IP,
        "status.hostIPs": POD_IP,
        "status.podIPs": POD_IP,
    }
    if path in simple:
        return str(simple[path])
    keyed = _META_KEY.match(path)
    if keyed:
        return str((meta.get(keyed.group(1)) or {}).get(keyed.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):  # volumes only: one `key="value"` per line
        items = sorted((meta.get(path.split(".")[1]) or {}).items())
        return "\n".join(f'{k}="{v}"' for k, v in items)
    raise ContainerConfigError(f"unsupported fieldRef fieldPath {path!r}")


def container_named(pod: dict[str, Any], name: str) -> dict[str, Any]:
    """A regular or init container by name (pkg/api/v1/resource/helpers.go findContainerInPod, the index's copy)."""
    spec = pod["spec"]
    return next(c for c in [*spec["containers"], *(spec.get("initContainers") or [])] if c["name"] == name)


def resource_value(container: dict[str, Any], ref: dict[str, Any], allocatable: dict[str, str]) -> str:
    """resourceFieldRef: ceil(quantity / divisor); an unset limit reads as the node's allocatable."""
    kind, _, resource = ref["resource"].partition(".")
    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    if kind == "limits":
        raw = limits.get(resource, allocatable.get(resource, "0"))
    elif kind == "requests":
        raw = requests.get(resource, limits.get(resource, "0"))  # the API defaults a request to its limit
    else:
        raise ContainerConfigError(f"unsupported resourceFieldRef resource {ref['resource']!r}")
    divisor = parse_quantity(str(ref.get("divisor", "1")))
    return str(math.ceil(Decimal(parse_quantity(str(raw))) / divisor))


def expand_refs(value: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: defined variables expand, undefined stay as written, `$$` -> `$`."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _REF.sub(sub, value)


def service_link_env(services: list[dict[str, Any]], api: ApiAccess | None) -> dict[str, str]:
    """What `enableServiceLinks` injects: <NAME>_SERVICE_HOST/_PORT and docker-link style <NAME>_PORT*.
    Cluster IPs are not routable here; only the `kubernetes` service points somewhere real (the API)."""
    env: dict[str, str] = {}

    def add(name: str, host: str, ports: list[dict[str, Any]]) -> None:
        if not ports:
            return
        prefix = name.upper().replace("-", "_")
        first = ports[0]
        env[f"{prefix}_SERVICE_HOST"] = host
        env[f"{prefix}_SERVICE_PORT"] = str(first["port"])
        for port in ports:
            if port.get("name"):
                env[f"{prefix}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(port["port"])
            proto = port.get("protocol", "TCP")
            base = f"{prefix}_PORT_{port['port']}_{proto}"
            env[base] = f"{proto.lower()}://{host}:{port['port']}"
            env[f"{base}_PROTO"], env[f"{base}_PORT"], env[f"{base}_ADDR"] = proto.lower(), str(port["port"]), host
        env[f"{prefix}_PORT"] = f"{first.get('protocol', 'TCP').lower()}://{host}:{first['port']}"

    for svc in services:
        spec = svc.get("spec") or {}
        add(svc["metadata"]["name"], spec.get("clusterIP") or "10.96.0.100", spec.get("ports") or [])
    if api is not None:
        add("kubernetes", api.host, [{"name": "https", "port": api.port, "protocol": "TCP"}])
    return env


def container_env(
    pod: dict[str, Any],
    container: dict[str, Any],
    lookup: Lookup,
    *,
    image_env: dict[str, str],
    services: list[dict[str, Any]],
    api: ApiAccess | None,
    allocatable: dict[str, str],
) -> dict[str, str]:
    """The environment the container's process starts with (image ENV included)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    namespace = meta.get("namespace", "default")
    env = dict(image_env)
    env["HOSTNAME"] = spec.get("hostname") or meta["name"]
    if spec.get("enableServiceLinks", True):
        env.update(service_link_env(services, api))
    elif api is not None:
        env.update({k: v for k, v in service_link_env([], api).items() if k.startswith("KUBERNETES_SERVICE")})
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if key in source:
                ref = source[key]
                values = source_values(kind, ref["name"], lookup, namespace, optional=bool(ref.get("optional")))
                env.update({prefix + k: v.decode() for k, v in (values or {}).items()})
    defined: dict[str, str] = {}  # $(VAR) sees only what `env` defined before it (and envFrom)
    defined.update({k: v for k, v in env.items() if k not in image_env})
    for var in container.get("env") or []:
        value = _env_value(pod, container, var, lookup, namespace, allocatable, defined)
        if value is None:  # an optional reference to something missing: the variable is left as it was
            continue
        env[var["name"]] = defined[var["name"]] = value
    return env


def _env_value(
    pod: dict[str, Any],
    container: dict[str, Any],
    var: dict[str, Any],
    lookup: Lookup,
    namespace: str,
    allocatable: dict[str, str],
    defined: dict[str, str],
) -> str | None:
    if "valueFrom" not in var:
        return expand_refs(str(var.get("value", "")), defined)
    source = var["valueFrom"]
    if "secretKeyRef" in source:
        return key_value("Secret", source["secretKeyRef"], lookup, namespace)
    if "configMapKeyRef" in source:
        return key_value("ConfigMap", source["configMapKeyRef"], lookup, namespace)
    if "fieldRef" in source:
        return field_value(pod, source["fieldRef"]["fieldPath"])
    if "resourceFieldRef" in source:
        ref = source["resourceFieldRef"]
        target = container
        if ref.get("containerName"):
            target = container_named(pod, ref["containerName"])
        return resource_value(target, ref, allocatable)
    raise ContainerConfigError(f"env {var['name']}: unsupported valueFrom {sorted(source)}")
