"""Pod volumes as directories on this machine, and each container's mounts of them.

emptyDir -> `<pod dir>/volumes/<name>` (`medium: Memory`: a directory on the host's /dev/shm tmpfs);
secret, configMap, downwardAPI, projected -> the same, filled with one file per key as the kubelet
writes them (without its `..data` symlink swap: contents do not change while a pod runs) and always
read-only; hostPath -> the host path itself (this machine is the node). The service-account token
volume that admission adds to every pod (unless automountServiceAccountToken is false on the pod or
its ServiceAccount) holds a token, the emulated API server's CA and the namespace.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from .envvars import (
    ApiAccess,
    ContainerConfigError,
    Lookup,
    configmap_data,
    container_named,
    field_value,
    resource_value,
    secret_data,
)
from .quantity import parse_quantity

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
SA_VOLUME = "kube-api-access-podrun"
API_DATA_KINDS = ("secret", "configMap", "downwardAPI", "projected")


class MountFailure(Exception):
    """MountVolume.SetUp failed: the pod stays ContainerCreating with a FailedMount event."""


class NotEmulated(Exception):
    """The pod uses something the pod runner does not emulate; refused loudly rather than faked."""


@dataclass(frozen=True)
class Volume:
    name: str
    host: Path
    read_only: bool  # API-data volumes are read-only whatever the mount says
    size_limit_bytes: int | None = None  # emptyDir sizeLimit (checked by the runner, as the kubelet's eviction manager)
    scratch: bool = True  # created for this pod (removed with it); False for hostPath


@dataclass(frozen=True)
class Mount:
    guest: str  # the container's path (mountPath)
    host: Path
    read_only: bool


def automounts_token(pod: dict[str, Any], lookup: Lookup) -> bool:
    spec = pod.get("spec") or {}
    if "automountServiceAccountToken" in spec:
        return bool(spec["automountServiceAccountToken"])
    sa = lookup("ServiceAccount", spec.get("serviceAccountName") or "default") or {}
    return bool(sa.get("automountServiceAccountToken", True))


def with_token_volume(pod: dict[str, Any], lookup: Lookup, api: ApiAccess | None) -> dict[str, Any]:
    """The pod as admission would store it: plus the projected service-account token volume."""
    if api is None or not automounts_token(pod, lookup):
        return pod
    spec = dict(pod["spec"])
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {
            "name": SA_VOLUME,
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                ]
            },
        },
    ]
    # plugin/pkg/admission/serviceaccount/admission.go mountServiceAccountToken: init containers mount it too
    for kind in ("initContainers", "containers"):
        if spec.get(kind):
            spec[kind] = [
                {**c, "volumeMounts": [*(c.get("volumeMounts") or []), {"name": SA_VOLUME, "mountPath": SA_MOUNT, "readOnly": True}]}
                for c in spec[kind]
            ]
    return {**pod, "spec": spec}


def _items(
    values: dict[str, bytes], items: list[dict[str, Any]] | None, kind: str, ns: str, name: str, optional: bool, default_mode: int
) -> dict[str, tuple[bytes, int]]:
    if not items:
        return {k: (v, default_mode) for k, v in values.items()}
    out = {}
    for item in items:
        if item["key"] not in values:
            if optional:
                continue
            raise MountFailure(f"couldn't find key {item['key']} in {kind} {ns}/{name}")
        out[item["path"]] = (values[item["key"]], int(item.get("mode", default_mode)))
    return out


def _source(kind: str, ref: dict[str, Any], lookup: Lookup, ns: str, default_mode: int) -> dict[str, tuple[bytes, int]]:
    name = cast(str, ref.get("name") or ref.get("secretName"))  # the schema requires one of them
    optional = bool(ref.get("optional"))
    obj = lookup(kind, name)
    if obj is None:
        if optional:
            return {}
        raise MountFailure(f'{kind.lower()} "{name}" not found')
    values = secret_data(obj) if kind == "Secret" else configmap_data(obj)
    return _items(values, ref.get("items"), kind, ns, name, optional, default_mode)


def _downward(
    pod: dict[str, Any], items: list[dict[str, Any]], default_mode: int, allocatable: dict[str, str]
) -> dict[str, tuple[bytes, int]]:
    out = {}
    for item in items:
        try:
            if "fieldRef" in item:
                value = field_value(pod, item["fieldRef"]["fieldPath"])
            else:
                ref = item["resourceFieldRef"]
                value = resource_value(container_named(pod, ref["containerName"]), ref, allocatable)
        except ContainerConfigError as e:
            raise MountFailure(str(e)) from e
        out[item["path"]] = (value.encode(), int(item.get("mode", default_mode)))
    return out


def volume_files(
    pod: dict[str, Any], volume: dict[str, Any], lookup: Lookup, api: ApiAccess | None, allocatable: dict[str, str]
) -> dict[str, tuple[bytes, int]]:
    """relative path -> (content, mode) for an API-data volume; raises MountFailure as the kubelet reports it."""
    ns = pod["metadata"].get("namespace", "default")
    if "secret" in volume:
        src = volume["secret"]
        return _source("Secret", src, lookup, ns, int(src.get("defaultMode", 0o644)))
    if "configMap" in volume:
        src = volume["configMap"]
        return _source("ConfigMap", src, lookup, ns, int(src.get("defaultMode", 0o644)))
    if "downwardAPI" in volume:
        src = volume["downwardAPI"]
        return _downward(pod, src.get("items") or [], int(src.get("defaultMode", 0o644)), allocatable)
    src = volume["projected"]
    mode = int(src.get("defaultMode", 0o644))
    out: dict[str, tuple[bytes, int]] = {}
    for part in src.get("sources") or []:
        if "secret" in part:
            out.update(_source("Secret", part["secret"], lookup, ns, mode))
        elif "configMap" in part:
            if part["configMap"]["name"] == "kube-root-ca.crt" and api is not None:
                out["ca.crt"] = (api.ca_pem, mode)  # published in every namespace by the API server
            else:
                out.update(_source("ConfigMap", part["configMap"], lookup, ns, mode))
        elif "downwardAPI" in part:
            out.update(_downward(pod, part["downwardAPI"].get("items") or [], mode, allocatable))
        elif "serviceAccountToken" in part:
            token = api.token if api is not None else f"podrun-unverified-{uuid.uuid4().hex}"
            out[part["serviceAccountToken"]["path"]] = (token.encode(), 0o600)
        else:
            raise NotEmulated(f"projected source {sorted(part)}")
    return out


def _memory_root() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def materialize(
    pod: dict[str, Any], lookup: Lookup, pod_dir: Path, *, api: ApiAccess | None, allocatable: dict[str, str]
) -> dict[str, Volume]:
    """Create every volume of the pod; MountFailure if one cannot be set up (missing Secret, hostPath...)."""
    out: dict[str, Volume] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = volume["name"]
        if "emptyDir" in volume:
            spec = volume["emptyDir"] or {}
            if spec.get("medium") == "Memory":
                host = Path(tempfile.mkdtemp(prefix=f"podrun-{name}-", dir=_memory_root()))
            else:
                host = pod_dir / "volumes" / name
                host.mkdir(parents=True, exist_ok=True)
            limit = int(parse_quantity(spec["sizeLimit"])) if spec.get("sizeLimit") else None
            out[name] = Volume(name, host, read_only=False, size_limit_bytes=limit)
        elif "hostPath" in volume:
            out[name] = Volume(name, _set_up(name, _host_path, volume["hostPath"]), read_only=False, scratch=False)
        elif any(kind in volume for kind in API_DATA_KINDS):
            files = _set_up(name, volume_files, pod, volume, lookup, api, allocatable)
            host = pod_dir / "volumes" / name
            host.mkdir(parents=True, exist_ok=True)
            for rel, (content, mode) in files.items():
                target = host / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
                target.chmod(mode)
            out[name] = Volume(name, host, read_only=True)
        else:
            raise NotEmulated(f"volume {name}: {sorted(k for k in volume if k != 'name')}")
    return out


def _set_up(name: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except MountFailure as e:
        raise MountFailure(f'MountVolume.SetUp failed for volume "{name}" : {e}') from e


def _host_path(src: dict[str, Any]) -> Path:
    path, kind = Path(src["path"]), src.get("type", "")
    if kind == "DirectoryOrCreate":
        path.mkdir(parents=True, exist_ok=True)
    elif kind == "Directory" and not path.is_dir():
        raise MountFailure(f"hostPath type check failed: {path} is not a directory")
    elif kind == "File" and not path.is_file():
        raise MountFailure(f"hostPath type check failed: {path} is not a file")
    return path


def container_mounts(container: dict[str, Any], volumes: dict[str, Volume]) -> list[Mount]:
    mounts = []
    for m in container.get("volumeMounts") or []:
        vol = volumes.get(m["name"])
        if vol is None:  # the API server rejects this at create time
            raise ContainerConfigError(f'volumeMount "{m["name"]}" names no volume of the pod')
        host = vol.host / m["subPath"] if m.get("subPath") else vol.host
        if m.get("subPath"):
            host.mkdir(parents=True, exist_ok=True)
        mounts.append(Mount(guest=m["mountPath"].rstrip("/") or "/", host=host, read_only=vol.read_only or bool(m.get("readOnly"))))
    return mounts


def remove_scratch(volumes: dict[str, Volume]) -> None:
    for vol in volumes.values():
        if vol.scratch:
            shutil.rmtree(vol.host, ignore_errors=True)
