"""Chooses the job launcher once, from configuration. The only place that knows the adapters.

The Kubernetes adapter is imported inside build_launcher, only when chosen, so the embedded default never loads
the kubernetes client or a kubeconfig.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from service.adapters.local.admission import TeamLimits, TeamQuotas
from service.config import Settings
from service.domain.records.ports import JobLauncher
from service.domain.self_check import CheckLine
from service.settings_env import read_settings


def team_quotas(settings: Settings) -> TeamQuotas:
    """The local launcher's per-team limits: the defaults, and each team's own over them."""
    default = TeamLimits(max_jobs=settings.team_max_jobs, max_chips=settings.team_max_chips)
    teams = {
        team: TeamLimits(
            max_jobs=default.max_jobs if quota.max_jobs is None else quota.max_jobs,
            max_chips=default.max_chips if quota.max_chips is None else quota.max_chips,
        )
        for team, quota in settings.team_quotas.items()
    }
    return TeamQuotas(default=default, teams=teams)


def build_launcher(settings: Settings) -> JobLauncher:
    if settings.launcher == "local":
        from service.adapters.local import LocalProcessLauncher
        from service.adapters.local.host_tpu import probe_host_tpu

        return LocalProcessLauncher(
            Path(settings.state_dir) / "local-jobs",
            settings.trainer_command,
            max_concurrent=settings.max_concurrent_jobs,
            poll_interval_s=settings.local_poll_interval_s,
            cancel_grace_s=settings.cancel_grace_s,
            quotas=team_quotas(settings),
            probe_tpu=functools.partial(probe_host_tpu, override=settings.host_tpu),
        )
    if settings.launcher == "kubernetes":
        try:
            from service.adapters.k8s.launcher import build_k8s_launcher
            from service.adapters.k8s.settings import K8sSettings
        except ImportError as e:
            raise RuntimeError(f"the kubernetes launcher is not available in this installation: {e}") from e
        return build_k8s_launcher(read_settings(K8sSettings))
    raise ValueError(f"unknown launcher {settings.launcher!r}; use 'local' or 'kubernetes'")


def check_launcher_settings(settings: Settings) -> None:
    """Read the chosen launcher's own settings now (SettingsInvalid), so a wrong one stops the start
    with its message rather than failing later inside the server's start-up."""
    if settings.launcher == "kubernetes":
        from service.adapters.k8s.settings import K8sSettings

        read_settings(K8sSettings)


def startup_checks(settings: Settings, launcher: JobLauncher) -> Callable[[], list[CheckLine]] | None:
    """`rljob doctor`'s checks, run once at start with the Kubernetes backend; None for the local one."""
    if settings.launcher != "kubernetes":
        return None
    from service.adapters.k8s.launcher import K8sJobLauncher
    from service.adapters.k8s_cluster.doctor import run_doctor, storage_prefixes

    if not isinstance(launcher, K8sJobLauncher):
        return None
    prefixes = storage_prefixes(settings.team_locations, settings.team_location_template)
    return lambda: run_doctor(launcher.client, launcher.settings, storage_prefixes=prefixes)
