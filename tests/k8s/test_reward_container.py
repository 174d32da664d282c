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

from service.adapters.k8s.render import render_manifests, render_manifests_yaml

from .conftest import JOB_ID, make_eval_spec, make_settings, make_spec
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
    assert "resources" not in sidecar  # Kueue and the scheduler count the pod as before


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
