"""Init containers and native sidecars (KEP-753: an init container with restartPolicy Always) in the pod runner
and on the emulated cluster; each test fails when the kubelet or controller rule it names is taken out."""

from __future__ import annotations

from harness.podrun.job_controller import matching_rule, pod_for
from harness.podrun.manifests import NS, workload
from harness.podrun.scheduling import requests_of

from .conftest import TRAINER_IMAGE
from .test_job_controller import JOB

# -- the pure parts: scheduling, Job controller -------------------------------------------------------------


def test_pod_requests_count_sidecars_and_the_largest_init_container():
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        "initContainers": [
            {"restartPolicy": "Always", "resources": {"limits": {"cpu": "500m"}}},  # a sidecar; limits as requests
            {"resources": {"requests": {"cpu": "2"}}},  # runs beside the sidecar before it: needs 2.5
        ],
    }
    got = requests_of(spec)
    assert got["cpu"] == 2.5 and got["memory"] == 1024**3


def test_a_pod_failure_rule_matches_init_container_exit_codes_after_the_regular_ones():
    rule = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [143]}}
    pod = {
        "metadata": {"name": "p", "namespace": NS},
        "status": {
            "containerStatuses": [{"name": "trainer", "state": {"terminated": {"exitCode": 1}}}],
            "initContainerStatuses": [{"name": "rewards", "state": {"terminated": {"exitCode": 143}}}],
        },
    }
    hit = matching_rule({"rules": [rule]}, pod)
    assert hit is not None and hit[2] == f"Container rewards for pod {NS}/p failed with exit code 143"
    scoped = {**rule, "onExitCodes": {**rule["onExitCodes"], "containerName": "trainer"}}
    assert matching_rule({"rules": [scoped]}, pod) is None  # rljob's FailJob rule names its trainer container


def test_an_indexed_job_gives_init_containers_the_completion_index():
    (_, rendered) = workload(JOB, ["unused"])
    rendered["metadata"]["uid"] = "u1"
    rendered["spec"]["template"]["spec"]["initContainers"] = [{"name": "rewards", "image": TRAINER_IMAGE, "restartPolicy": "Always"}]
    pod = pod_for(rendered, 3, "abcde")
    (rewards,) = pod["spec"]["initContainers"]
    assert rewards["env"][0]["name"] == "JOB_COMPLETION_INDEX"
