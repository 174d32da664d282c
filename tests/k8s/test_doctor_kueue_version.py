"""`rljob doctor` names the installed Kueue line from discovery: v0.20 no longer serves kueue.x-k8s.io/v1beta1
(kueue CHANGELOG/CHANGELOG-0.20.md, #14558); v0.15-v0.19 serve v1beta1 and v1beta2."""

from __future__ import annotations

from service.adapters.k8s_cluster.doctor import api_checks

from .conftest import make_settings


def _version_line(served: set[str]) -> tuple[str, str, str]:
    lines = api_checks({"batch/v1", *served}, make_settings(kueue_queue="rljob-v6e"))
    (line,) = [li for li in lines if li.name == "kueue version"]
    return line.status, line.message, line.fix


def test_the_doctor_tells_v019_from_v020_by_the_served_versions():
    status, old, fix = _version_line({"kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"})
    assert old.startswith("v0.15-v0.19") and "Pending/Inadmissible" in old
    # v0.19 lacks unscheduledTimeout: a warning that names rljob's own report of a stranded job, and what to check.
    assert status == "warn" and "stranded after RLJOB_K8S_STRANDED_AFTER_S" in old and "job.stranded" in fix
    status, new, _ = _version_line({"kueue.x-k8s.io/v1beta2"})
    assert status == "ok" and new.startswith("v0.20 or later") and "`default`" in new
    assert not [li for li in api_checks({"batch/v1"}, make_settings(kueue_queue="q")) if li.name == "kueue version"]
