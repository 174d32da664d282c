"""RLJOB_K8S_TRAINER_RUNTIME_CLASS (GKE Sandbox, gVisor): every trainer and eval pod runs under it, a golden shows
the single-host TPU Job, and a multi-host slice (gVisor runs single-host TPU shapes only) is refused at submit
and at render, never run outside the sandbox.

Regenerate the golden with RLJOB_UPDATE_GOLDEN=1 and review the diff like code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from service.adapters.k8s.errors import ManifestError
from service.adapters.k8s.launcher import build_k8s_launcher
from service.adapters.k8s.render import render_manifests, render_manifests_yaml
from service.domain.records.errors import InvalidRequest

from .conftest import JOB_ID, configuration_for, make_cpu_spec, make_eval_spec, make_settings, make_spec
from .test_manifests import validate_strict

GOLDEN = Path(__file__).parent / "golden"


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    job = doc["spec"]["replicatedJobs"][0]["template"] if doc["kind"] == "JobSet" else doc
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def test_golden_v6e_8_under_gvisor() -> None:
    settings = make_settings(kueue_queue="tpu-queue", trainer_runtime_class="gvisor")
    text = render_manifests_yaml(make_spec(team="ml-research"), JOB_ID, settings)
    path = GOLDEN / "v6e-8-gvisor.yaml"
    if os.environ.get("RLJOB_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with RLJOB_UPDATE_GOLDEN=1"
    assert text == path.read_text(), "v6e-8-gvisor manifests changed; if intended, regenerate with RLJOB_UPDATE_GOLDEN=1"
    docs = render_manifests(make_spec(team="ml-research"), JOB_ID, settings)
    for doc in docs:
        validate_strict(doc)
    pod = _pod(docs[1])
    assert pod["runtimeClassName"] == "gvisor"
    # The TPU slice's scheduling is unchanged; GKE's RuntimeClass brings the sandbox pool's selector and toleration.
    assert "sandbox.gke.io/runtime" not in str(pod) and pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x4"


@pytest.mark.parametrize("kind", ["cpu", "eval", "v5p-8"])
def test_every_single_host_trainer_and_eval_pod_runs_under_the_runtime_class(kind: str) -> None:
    spec = {"cpu": make_cpu_spec, "eval": make_eval_spec}.get(kind, lambda: make_spec("v5p-8", 4))()
    for queue in (None, "q"):
        docs = render_manifests(spec, JOB_ID, make_settings(kueue_queue=queue, host_paths=["/data/rljob"], trainer_runtime_class="gvisor"))
        for doc in docs:
            validate_strict(doc)
        assert _pod(docs[1])["runtimeClassName"] == "gvisor"
    # Unset (the default): the node's default runtime, and no runtimeClassName key at all.
    assert "runtimeClassName" not in _pod(render_manifests(spec, JOB_ID, make_settings(host_paths=["/data/rljob"]))[1])


def test_a_multi_host_slice_is_refused_at_submit_and_at_render(kmock) -> None:
    settings = make_settings(trainer_runtime_class="gvisor")
    launcher = build_k8s_launcher(settings, sleep=lambda s: None, configuration=configuration_for(kmock))
    with pytest.raises(InvalidRequest) as refused:
        launcher.check_submittable(make_spec("v6e-16", 4))
    assert refused.value.loc == ("body", "hardware", "accelerator")
    assert "multi-host" in str(refused.value) and "RLJOB_K8S_TRAINER_RUNTIME_CLASS" in str(refused.value)
    launcher.check_submittable(make_spec())  # a single-host slice is fine
    assert not list(kmock), "refused before any call to the cluster"
    with pytest.raises(ManifestError, match="single-host TPU shapes only"):
        render_manifests(make_spec("v6e-16", 4), JOB_ID, settings)
    assert [d["kind"] for d in render_manifests(make_spec("v6e-16", 4), JOB_ID, make_settings())] == ["ConfigMap", "JobSet"]


@pytest.mark.parametrize("bad", ["gVisor", "g_visor", "-gvisor", "x" * 64])
def test_a_runtime_class_that_is_not_a_dns_label_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="not a RuntimeClass name"):
        make_settings(trainer_runtime_class=bad)
