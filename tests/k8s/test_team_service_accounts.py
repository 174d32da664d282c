"""k8s/teams/: the example per-team ServiceAccount is a valid object that a team's trainer Job names,
bound through Workload Identity to a Google service account, with no API token (like rljob-trainer)."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import yaml

from service.adapters.k8s.render import render_manifests

from .conftest import JOB_ID, make_settings, make_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "k8s" / "teams" / "serviceaccount-team-a.yaml"
BASE_ACCOUNTS = EXAMPLE.parents[1] / "base" / "serviceaccounts.yaml"


def test_the_example_team_service_account_is_what_a_team_job_runs_as() -> None:
    (account,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    kubernetes_validate.validate(account, make_settings().gke_minor_version, strict=True)
    name = account["metadata"]["name"]
    gsa = account["metadata"]["annotations"]["iam.gke.io/gcp-service-account"]
    assert gsa.endswith(".iam.gserviceaccount.com") and gsa.startswith("rljob-team-a@")
    assert account["automountServiceAccountToken"] is False
    settings = make_settings(team_service_accounts={"team-a": name})
    job = render_manifests(make_spec(team="team-a"), JOB_ID, settings)[1]
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == name
    # The shared trainer account keeps the same shape, so a team's account is a drop-in for it.
    shared = next(d for d in yaml.safe_load_all(BASE_ACCOUNTS.read_text()) if d["metadata"]["name"] == "rljob-trainer")
    assert shared["automountServiceAccountToken"] == account["automountServiceAccountToken"]
    assert shared["metadata"]["labels"].items() <= account["metadata"]["labels"].items()
