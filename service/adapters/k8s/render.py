"""Manifests as plain data: for `rljob render spec.yaml` / `submit --dry-run` and for validation.

`render_manifests_yaml` prints a multi-document YAML stream for `kubectl apply -f -`. The Job's
ConfigMap comes first so the pod never waits on a missing volume.
"""

from __future__ import annotations

from typing import Any

import yaml

from trainer.contract import JobSpec, default_job_id

from .manifests import build_workload
from .serialize import to_plain
from .settings import K8sSettings


def render_manifests(spec: JobSpec, job_id: str | None, settings: K8sSettings) -> list[dict[str, Any]]:
    workload = build_workload(spec, job_id or default_job_id(spec), settings)
    main = workload.job if workload.job is not None else workload.jobset
    return [to_plain(workload.config_map), to_plain(main)]


class _BlockStrDumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    # The ConfigMap's spec.json reads as a block, not one long escaped line.
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_BlockStrDumper.add_representer(str, _str_presenter)


def dump_yaml(documents: list[dict[str, Any]]) -> str:
    return yaml.dump_all(documents, Dumper=_BlockStrDumper, sort_keys=False, default_flow_style=False)


def render_manifests_yaml(spec: JobSpec, job_id: str | None, settings: K8sSettings) -> str:
    return dump_yaml(render_manifests(spec, job_id, settings))
