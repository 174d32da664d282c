"""`rljob doctor`: check that the Kubernetes cluster in the kubeconfig (or the pod's, in-cluster) is
ready for rljob, with the settings the service would run with (RLJOB_* and RLJOB_K8S_* variables).

One line per check (ok / warn / fail, the check, and for warn/fail the fix); exit 1 when any check
fails, 2 when the settings or kubeconfig are unusable. docs/doctor.md describes each check.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from .client import CliError, CliExit, handles_errors
from .output import console

STYLE = {"ok": "green", "warn": "yellow", "fail": "red"}


@handles_errors
def doctor(
    storage: Annotated[bool, typer.Option(help="also list the configured gs:// prefixes as the service's identity")] = True,
    probes: Annotated[
        bool,
        typer.Option(help="also create probe Jobs/JobSets: dry-run (webhooks) and queued (Kueue gives them a Workload), deleted after"),
    ] = True,
    probe_wait: Annotated[
        float | None,
        typer.Option(
            min=1, max=300, help="seconds the queued probes wait for Kueue's Workload (default 10; more on a slow or busy cluster)"
        ),
    ] = None,
) -> None:
    """Check the cluster is ready for rljob: APIs, RBAC, webhooks, Kueue queues, configuration and nodes, HF token Secret, storage."""
    from kubernetes.config.config_exception import ConfigException

    from service.adapters.k8s.launcher import build_k8s_client
    from service.adapters.k8s.settings import K8sSettings
    from service.adapters.k8s_cluster.doctor import run_doctor, storage_prefixes
    from service.config import load_settings
    from service.domain.self_check import failed
    from service.settings_env import SettingsInvalid, read_settings

    try:
        k8s_settings, settings = read_settings(K8sSettings), load_settings()
    except SettingsInvalid as e:
        raise CliError(str(e), CliExit.BAD_INPUT) from None
    try:
        client = build_k8s_client(k8s_settings)
    except (ConfigException, OSError, ValueError) as e:
        where = "the pod's service account" if k8s_settings.in_cluster else (k8s_settings.kubeconfig or "the default kubeconfig")
        raise CliError(f"cannot load the cluster's credentials from {where}: {e}", CliExit.BAD_INPUT) from e
    prefixes = storage_prefixes(settings.team_locations, settings.team_location_template) if storage else []
    lines = run_doctor(client, k8s_settings, storage_prefixes=prefixes, probes=probes, probe_wait_s=probe_wait)
    for line in lines:
        console.print(f"[{STYLE[line.status]}]{escape(line.render())}[/]", highlight=False, soft_wrap=True)
    counts = {s: sum(1 for line in lines if line.status == s) for s in STYLE}
    console.print(f"{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail", highlight=False)
    if failed(lines):
        raise typer.Exit(CliExit.FAILED)
