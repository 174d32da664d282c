"""RLJOB_K8S_REWARD_CONTAINER: a pod whose job loads user reward code runs its reward workers in a native sidecar of
their own (service/adapters/k8s/reward_container.py): rendered, strictly validated against the cluster's schema,
golden-tested; nothing of the trainer's secrets, spec or storage reaches it. The emulated cluster runs it in
tests/k8s/test_reward_container_runs.py.

Regenerate the golden with RLJOB_UPDATE_GOLDEN=1 and review the diff like code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from service.adapters.k8s.errors import ManifestError
from service.adapters.k8s.launcher import build_k8s_launcher
from service.adapters.k8s.render import render_manifests, render_manifests_yaml
from service.domain.records.errors import InvalidRequest

from .conftest import JOB_ID, configuration_for, make_eval_spec, make_settings, make_spec
from .test_manifests import validate_strict

GOLDEN = Path(__file__).parent / "golden"
REWARDS = {"rewards": {"functions_path": "gs://example-bucket/rljob/rewards/judge.py", "functions": ["judge"]}}


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    job = doc["spec"]["replicatedJobs"][0]["template"] if doc["kind"] == "JobSet" else doc
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def _with_rewards(**extra: Any):
    return make_spec(team="ml-research", grpo={"num_batches": 50, "num_test_batches": 10, **REWARDS}, **extra)


def test_golden_v6e_8_under_gvisor_with_the_reward_container() -> None:
    settings = make_settings(kueue_queue="tpu-queue", trainer_runtime_class="gvisor", reward_container=True)
    text = render_manifests_yaml(_with_rewards(), JOB_ID, settings)
    path = GOLDEN / "v6e-8-gvisor-reward-container.yaml"
    if os.environ.get("RLJOB_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with RLJOB_UPDATE_GOLDEN=1"
    assert text == path.read_text(), "v6e-8-gvisor-reward-container manifests changed; if intended, regenerate with RLJOB_UPDATE_GOLDEN=1"
    for doc in render_manifests(_with_rewards(), JOB_ID, settings):
        validate_strict(doc)


def test_the_reward_container_gets_none_of_the_trainers_secrets_spec_or_storage() -> None:
    settings = make_settings(host_paths=["/data/rljob"], reward_container=True)
    pod = _pod(render_manifests(_with_rewards(), JOB_ID, settings)[1])
    (sidecar,) = pod["initContainers"]
    trainer = pod["containers"][0]
    assert sidecar["restartPolicy"] == "Always" and sidecar["image"] == trainer["image"]
    assert sidecar["command"] == ["python", "-m", "trainer.rewards_sandbox.host", "--socket", "/var/run/rljob-rewards/host.sock"]
    assert "env" not in sidecar and "envFrom" not in sidecar  # no HF token, no RLJOB_* setting
    assert [m["name"] for m in sidecar["volumeMounts"]] == ["reward-host"]  # not the spec, the host paths or /dev/shm
    context = sidecar["securityContext"]
    assert context["runAsUser"] == 65534 and context["runAsNonRoot"] and context["capabilities"] == {"drop": ["ALL"]}
    assert not context["allowPrivilegeEscalation"]
    assert {"name": "RLJOB_REWARD_HOST", "value": "/var/run/rljob-rewards/host.sock"} in trainer["env"]
    assert {"name": "reward-host", "mountPath": "/var/run/rljob-rewards"} in trainer["volumeMounts"]
    assert {"name": "reward-host", "emptyDir": {}} in pod["volumes"]


@pytest.mark.parametrize(
    ("spec", "sidecar"),
    [
        (lambda: _with_rewards(), True),
        (lambda: make_spec(), False),  # MaxText's built-in rewards: no user code
        (lambda: make_eval_spec(), False),  # a built-in suite
        (
            lambda: make_eval_spec(
                evaluation={
                    "suite": {
                        "name": "mine",
                        "data": "gs://example-bucket/rljob/eval.jsonl",
                        "rewards_path": "gs://example-bucket/rljob/r.py",
                        "rewards": ["judge"],
                    },
                    "checkpoint": {"format": "huggingface", "label": "base"},
                }
            ),
            True,
        ),
    ],
    ids=["training-with-rewards", "training-builtin-rewards", "eval-builtin-suite", "eval-user-suite"],
)
def test_only_pods_that_load_user_reward_code_get_it_and_only_with_the_setting(spec, sidecar: bool) -> None:
    for enabled in (True, False):
        docs = render_manifests(spec(), JOB_ID, make_settings(reward_container=enabled))
        for doc in docs:
            validate_strict(doc)
        pod = _pod(docs[1])
        assert ("initContainers" in pod) == (sidecar and enabled)
        assert any(e["name"] == "RLJOB_REWARD_HOST" for e in pod["containers"][0]["env"]) == (sidecar and enabled)


@pytest.mark.parametrize("kind", ["train", "eval"])
def test_the_reward_container_has_its_workers_resources_carved_from_the_trainers(kind) -> None:
    """Requests and limits alike (half a CPU and the address-space bound per worker, two for training, one for an
    eval job, plus the server), taken out of the trainer container's: Kueue and the scheduler sum a sidecar's
    requests with the pod's (kueue_setup.pod_requests), so the pod's total is what it was without the container."""
    from service.adapters.k8s.kueue_setup import pod_requests

    if kind == "train":
        spec = make_spec(team="ml-research", grpo={"rewards": {**REWARDS["rewards"], "memory_mib": 3000}})
        expected = {"cpu": "1000m", "memory": f"{2 * 3000 + 256}Mi"}
    else:
        suite = {"name": "mine", "data": "gs://example-bucket/rljob/eval.jsonl", "rewards_path": "gs://example-bucket/rljob/r.py"}
        spec = make_eval_spec(
            evaluation={"suite": {**suite, "rewards": ["judge"]}, "checkpoint": {"format": "huggingface", "label": "base"}}
        )
        expected = {"cpu": "500m", "memory": f"{2048 + 256}Mi"}
    alone, beside = (_pod(render_manifests(spec, JOB_ID, make_settings(reward_container=on))[1]) for on in (False, True))
    (sidecar,) = beside["initContainers"]
    assert sidecar["resources"] == {"requests": expected, "limits": expected}
    assert pod_requests(beside) == pod_requests(alone)
    trainer = beside["containers"][0]["resources"]
    assert trainer["limits"]["memory"] == trainer["requests"]["memory"]  # still an OOM kill, never an eviction


def test_a_reward_container_that_leaves_the_trainer_too_little_is_refused_with_what_to_change(kmock) -> None:
    spec = make_spec(team="ml-research", grpo={"rewards": {**REWARDS["rewards"], "memory_mib": 4096}})
    settings = make_settings(reward_container=True, memory_request="8Gi")
    with pytest.raises(ManifestError, match="leave the trainer .* lower grpo.rewards.memory_mib"):
        render_manifests(spec, JOB_ID, settings)
    launcher = build_k8s_launcher(settings, sleep=lambda s: None, configuration=configuration_for(kmock))
    with pytest.raises(InvalidRequest) as refused:  # at submit, before any TPU time: a 422 naming the field
        launcher.check_submittable(spec)
    assert refused.value.loc == ("body", "grpo", "rewards", "memory_mib") and "leave the trainer" in str(refused.value)
    launcher.check_submittable(make_spec(team="ml-research", grpo=REWARDS))  # the default bound fits
    assert not list(kmock), "refused before any call to the cluster"
