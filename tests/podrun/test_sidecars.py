"""Init containers and native sidecars (KEP-753: an init container with restartPolicy Always) in the pod runner
and on the emulated cluster; each test fails when the kubelet or controller rule it names is taken out."""

from __future__ import annotations

import asyncio
import copy
import textwrap

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from harness.podrun.controllers.job_controller import matching_rule, pod_for
from harness.podrun.controllers.scheduling import requests_of
from harness.podrun.manifests import NS, workload
from harness.podrun.pods.envvars import ApiAccess

from .conftest import TRAINER_IMAGE, log, make_pod, python, wait_until
from .test_job_controller import JOB, conditions, job, submit

pytestmark = pytest.mark.timeout(90)
SHARED = "/run/rewards"  # the emptyDir the sidecar and the trainer share

# Serves "scores" on a unix socket in the shared emptyDir; on SIGTERM records whether the trainer had finished,
# then exits with $EXIT_ON_TERM (1 by default: a sidecar's exit code must not fail the pod).
SIDECAR = textwrap.dedent(
    """
    import os, signal, socket, sys, time
    d = sys.argv[1]
    def stop(*_):
        time.sleep(float(os.environ.get("SLOW_EXIT_S", "0")))
        seen = "main-done" if os.path.exists(os.path.join(d, "main-done")) else "main-running"
        later = os.environ.get("LATER_SIDECAR")
        if later:
            seen += " later-exited" if os.path.exists(os.path.join(d, later + "-exited")) else " later-running"
        open(os.path.join(d, os.environ["NAME"] + "-sigterm"), "w").write(seen)
        open(os.path.join(d, os.environ["NAME"] + "-exited"), "w").write("")
        sys.exit(int(os.environ.get("EXIT_ON_TERM", "1")))
    signal.signal(signal.SIGTERM, stop)
    attempts = os.path.join(d, os.environ["NAME"] + "-attempts")
    open(attempts, "a").write("x")
    if len(open(attempts).read()) <= int(os.environ.get("CRASHES", "0")):
        print("crashing", flush=True); time.sleep(0.5); sys.exit(4)
    while os.environ.get("WAIT_FOR_GO") and not os.path.exists(os.path.join(d, "go")):
        time.sleep(0.05)
    path = os.path.join(d, os.environ["NAME"] + ".sock")
    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX); srv.bind(path); os.chmod(path, 0o777); srv.listen()
    print("serving as", os.getuid(), flush=True)
    if "--port" in sys.argv:
        import http.server, threading
        port = int(sys.argv[sys.argv.index("--port") + 1])
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(500 if self.path == "/broken" else 200); self.end_headers()
            def log_message(self, *a): pass
        threading.Thread(target=http.server.HTTPServer(("127.0.0.1", port), H).serve_forever, daemon=True).start()
    while True:
        conn, _ = srv.accept()
        asked = conn.recv(100).decode()
        conn.sendall(f"score({asked}) uid={os.getuid()} greeting={os.environ.get('GREETING')}".encode()); conn.close()
    """
)

# Asks the sidecar once; with WAIT_S=0 it does not wait for the socket (so it fails if started too early).
MAIN = textwrap.dedent(
    """
    import os, socket, sys, time
    d, code = sys.argv[1], int(sys.argv[2])
    path = os.path.join(d, os.environ.get("SOCK", "rewards") + ".sock")
    deadline = time.time() + float(os.environ.get("WAIT_S", "20"))
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.05)
    if not os.path.exists(path):
        print("no sidecar socket", flush=True); sys.exit(3)
    c = socket.socket(socket.AF_UNIX); c.connect(path); c.sendall(b"rollout-1")
    print(c.recv(200).decode(), flush=True)
    open(os.path.join(d, "main-done"), "w").write("")
    sys.exit(code)
    """
)


def sidecar(name: str = "rewards", *args: str, env: dict[str, str] | None = None, **container: object) -> dict:
    variables = [{"name": "NAME", "value": name}, *({"name": k, "value": v} for k, v in (env or {}).items())]
    return {
        "name": name,
        "image": TRAINER_IMAGE,
        "restartPolicy": "Always",
        "command": ["python", "-c", SIDECAR, SHARED, *args],
        "env": variables,
        "volumeMounts": [{"name": "shared", "mountPath": SHARED}],
        **container,
    }


def main(code: int = 0, **env: str) -> dict:
    return python(
        MAIN,
        SHARED,
        str(code),
        env=[{"name": k, "value": v} for k, v in env.items()],
        volumeMounts=[{"name": "shared", "mountPath": SHARED}],
    )


def started_when_serving(name: str, **env: str) -> dict:
    """A sidecar whose startup probe reads the port it opens once it serves: the regular containers start after."""
    return sidecar(
        name,
        "--port",
        "8000",
        env=env,
        ports=[{"name": "http", "containerPort": 8000}],
        startupProbe={"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1, "failureThreshold": 30},
    )


def pod_with(*init: dict, containers: list[dict] | None = None, restart_policy: str = "Never", **spec: object) -> dict:
    pod = make_pod(*(containers or [main()]), volumes=[{"name": "shared", "emptyDir": {}}], restart_policy=restart_policy, **spec)
    pod["spec"]["initContainers"] = list(init)
    return pod


def statuses(runner, kind: str = "initContainerStatuses") -> dict[str, dict]:
    return {s["name"]: s for s in runner.status().get(kind, [])}


def shared_file(runner, name: str) -> str:
    host = runner.volume_host_path("shared")
    return (host / name).read_text() if host is not None and (host / name).exists() else ""


# -- on the emulated cluster: the trainer Job with a rewards sidecar ---------------------------------------


def with_rewards_sidecar(objects: list[dict], *, trainer_code: int = 0) -> list[dict]:
    objects = copy.deepcopy(objects)
    pod = objects[1]["spec"]["template"]["spec"]
    pod["terminationGracePeriodSeconds"] = 5
    # Memory: on /dev/shm, a short host path; under proot a unix socket is only seen at its container path
    # by the other container when its host path fits sockaddr_un (108 bytes), which the node's work dir may not
    pod["volumes"].append({"name": "shared", "emptyDir": {"medium": "Memory"}})
    trainer = pod["containers"][0]
    trainer["volumeMounts"].append({"name": "shared", "mountPath": SHARED})
    trainer["command"] = ["python", "-c", MAIN, SHARED, str(trainer_code)]
    pod["initContainers"] = [
        sidecar(env={"GREETING": "hello"}, securityContext={"runAsUser": 2000}, resources={"requests": {"cpu": "100m"}})
    ]
    return objects


async def test_a_job_whose_trainer_uses_a_sidecar_completes_and_the_sidecar_stops_after_the_trainer(emulated):
    await submit(emulated, with_rewards_sidecar(workload(JOB, ["unused"])))
    done = await emulated.wait_for(lambda: "Complete" in conditions(job(emulated)) and job(emulated), "Complete", 60)
    assert (done["status"]["succeeded"], done["status"]["failed"]) == (1, 0)
    (pod,) = emulated.pods(NS, **{"job-name": JOB})
    status, name = pod["status"], pod["metadata"]["name"]
    assert status["phase"] == "Succeeded"
    (trainer,) = status["containerStatuses"]
    (rewards,) = status["initContainerStatuses"]
    assert trainer["state"]["terminated"]["exitCode"] == 0
    # The kubelet stopped the sidecar (SIGTERM) after the trainer ended; it exited 1, which fails nothing.
    assert rewards["name"] == "rewards" and rewards["restartCount"] == 0
    assert rewards["state"]["terminated"]["exitCode"] == 1 and rewards["started"] is False
    runner = emulated.runner(NS, name)
    assert shared_file(runner, "rewards-sigterm") == "main-done"
    killing = [e["message"] for e in emulated.api.list("Event", NS) if e["reason"] == "Killing" and e["involvedObject"]["name"] == name]
    assert killing == ["Stopping container rewards"]
    # The pod log endpoint by container name, read with the real client as the launcher reads it.
    cfg = k8s.Configuration()
    cfg.host = str(emulated.kmock.url).rstrip("/")
    core = k8s.CoreV1Api(k8s.ApiClient(cfg))
    trainer_log = await asyncio.to_thread(core.read_namespaced_pod_log, name, NS, container="trainer")
    assert trainer_log.strip() == "score(rollout-1) uid=2000 greeting=hello"  # the sidecar's env and runAsUser
    sidecar_log = await asyncio.to_thread(core.read_namespaced_pod_log, name, NS, container="rewards")
    assert sidecar_log.strip() == "serving as 2000"
    with pytest.raises(ApiException) as refused:
        await asyncio.to_thread(core.read_namespaced_pod_log, name, NS, container="nope")
    assert refused.value.status == 400 and f"container nope is not valid for pod {name}" in refused.value.body


async def test_a_failing_trainer_fails_its_pod_and_job_though_the_sidecar_exits_0(emulated):
    objects = with_rewards_sidecar(workload(JOB, ["unused"], backoff_limit=0), trainer_code=75)
    objects[1]["spec"]["template"]["spec"]["initContainers"][0]["env"].append({"name": "EXIT_ON_TERM", "value": "0"})
    await submit(emulated, objects)
    failed = await emulated.wait_for(lambda: "Failed" in conditions(job(emulated)) and job(emulated), "Failed", 60)
    assert conditions(failed)["Failed"]["reason"] == "BackoffLimitExceeded"
    (pod,) = emulated.pods(NS, **{"job-name": JOB})
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 75


# -- the pod runner: order, restarts, termination -----------------------------------------------------------


def test_the_trainer_starts_only_once_the_sidecar_passed_its_startup_probe(runs):
    # The sidecar serves (socket, then the port its startup probe reads) only once the test says go; the
    # trainer does not wait for the socket: started any earlier, it fails.
    gated = started_when_serving("rewards", WAIT_FOR_GO="1")
    runner = runs.start(pod_with(gated, containers=[main(WAIT_S="0")]))
    wait_until(lambda: "x" in shared_file(runner, "rewards-attempts"), "the sidecar running")
    before = runner.status()
    assert statuses(runner)["rewards"]["started"] is False and before["phase"] == "Pending"
    assert before["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert {"type": "Initialized", "status": "False"} in before["conditions"]
    (runner.volume_host_path("shared") / "go").write_text("")
    assert runner.wait(30), runner.status()
    assert runner.status()["phase"] == "Succeeded", log(runner)
    assert log(runner).strip().startswith("score(rollout-1)")


def test_a_crashing_sidecar_is_restarted_under_restart_policy_never(runs):
    runner = runs.run(pod_with(sidecar(env={"CRASHES": "1"})))
    assert runner.status()["phase"] == "Succeeded", log(runner)
    rewards = statuses(runner)["rewards"]
    assert rewards["restartCount"] == 1 and rewards["lastState"]["terminated"]["exitCode"] == 4
    assert log(runner, "rewards", previous=True).strip() == "crashing" and log(runner, "rewards").startswith("serving")


def test_sidecars_stop_in_reverse_order_after_the_regular_containers_and_the_pod_runs_until_they_have(runs):
    # "a" is declared before "b": b gets SIGTERM first and takes a second to exit; a only after that. b has a
    # startup probe so that the trainer (which talks only to a) starts once b serves, its SIGTERM handler in place:
    # without it, a loaded machine once ended the trainer before b's Python had installed it, and b died at once.
    first = sidecar("a", env={"LATER_SIDECAR": "b", "EXIT_ON_TERM": "0"})
    second = started_when_serving("b", SLOW_EXIT_S="1")
    runner = runs.start(pod_with(first, second, containers=[main(SOCK="a")]))
    seen = wait_until(
        lambda: (
            (c := runner.status())["containerStatuses"][0]["state"].get("terminated")
            and statuses(runner)["b"]["state"].get("running")
            and c
        ),
        "the trainer ended while a sidecar still runs",
    )
    assert seen["phase"] == "Running"  # getPhase: a running sidecar keeps the pod Running
    assert runner.wait(30)
    assert shared_file(runner, "a-sigterm") == "main-done later-exited"
    assert runner.status()["phase"] == "Succeeded"  # b exited 1 on SIGTERM: sidecars' exit codes do not count
    killing = [e.message for e in runner.drain_events() if e.reason == "Killing"]
    assert sorted(killing) == ["Stopping container a", "Stopping container b"]


def test_deletion_stops_the_sidecar_only_after_the_regular_containers_exited(runs):
    slow_to_stop = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        "    time.sleep(1); open('/run/rewards/main-done', 'w').write(''); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('up', flush=True); time.sleep(60)\n"
    )
    runner = runs.start(pod_with(sidecar(), containers=[python(slow_to_stop, volumeMounts=[{"name": "shared", "mountPath": SHARED}])]))
    wait_until(lambda: "up" in log(runner), "the trainer up")
    runner.terminate()
    assert runner.wait(30)
    assert shared_file(runner, "rewards-sigterm") == "main-done"
    assert runner.status()["phase"] == "Succeeded"  # the trainer exited 0; the sidecar's 1 does not count


def test_a_sidecar_s_probes_count_its_readiness_in_the_pod_s_and_its_liveness_restarts_it(runs):
    broken = {"httpGet": {"path": "/broken", "port": "http"}, "periodSeconds": 1, "failureThreshold": 1}
    unwell = sidecar(
        "rewards",
        "--port",
        "8000",
        ports=[{"name": "http", "containerPort": 8000}],
        readinessProbe=broken,
        livenessProbe={**broken, "initialDelaySeconds": 1},  # it runs a while each time: the trainer starts meanwhile
    )
    waits_for_go = "import os, time\nwhile not os.path.exists('/run/rewards/go'): time.sleep(0.05)"
    runner = runs.start(pod_with(unwell, containers=[python(waits_for_go, volumeMounts=[{"name": "shared", "mountPath": SHARED}])]))
    wait_until(lambda: statuses(runner)["rewards"]["restartCount"] >= 1, "the sidecar restarted by its liveness probe")
    status = wait_until(lambda: (s := runner.status())["containerStatuses"][0]["ready"] and s, "the trainer running and ready")
    assert status["phase"] == "Running"
    assert {"type": "Ready", "status": "False"} in status["conditions"]  # the sidecar is not ready
    assert "Init container rewards failed liveness probe" in [e.message for e in runner.drain_events() if e.reason == "Killing"]
    (runner.volume_host_path("shared") / "go").write_text("")
    assert runner.wait(30) and runner.status()["phase"] == "Succeeded"


def test_plain_init_containers_run_to_completion_in_order_before_the_rest(runs):
    record = "import os, sys; open('/run/rewards/order', 'a').write(sys.argv[1] + ' ')"
    init = [
        {
            "name": f"init-{i}",
            "image": TRAINER_IMAGE,
            **python(record, f"init-{i}"),
            "volumeMounts": [{"name": "shared", "mountPath": SHARED}],
        }
        for i in (1, 2)
    ]
    check = "import sys; sys.exit(0 if open('/run/rewards/order').read() == 'init-1 init-2 ' else 9)"
    runner = runs.run(pod_with(*init, containers=[python(check, volumeMounts=[{"name": "shared", "mountPath": SHARED}])]))
    assert runner.status()["phase"] == "Succeeded"
    assert [s["ready"] for s in runner.status()["initContainerStatuses"]] == [True, True]  # exited 0
    assert {"type": "Initialized", "status": "True"} in runner.status()["conditions"]


def test_a_failed_init_container_fails_a_never_restarted_pod_and_is_retried_otherwise(runs):
    fails_once = (
        "p = '/run/rewards/tries'; open(p, 'a').write('x'); n = len(open(p).read());print('try', n); raise SystemExit(2 if n == 1 else 0)"
    )
    plain = {"name": "setup", "image": TRAINER_IMAGE, **python(fails_once), "volumeMounts": [{"name": "shared", "mountPath": SHARED}]}
    never = runs.run(pod_with(sidecar(), plain))
    assert never.status()["phase"] == "Failed"
    setup, rewards = statuses(never)["setup"], statuses(never)["rewards"]
    assert setup["state"]["terminated"]["exitCode"] == 2 and setup["restartCount"] == 0
    assert "terminated" in rewards["state"]  # the sidecar already running was stopped
    assert never.status()["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}  # never started
    on_failure = runs.run(pod_with(plain, containers=[python("print('main ran')")], restart_policy="OnFailure"))
    assert on_failure.status()["phase"] == "Succeeded"
    assert statuses(on_failure)["setup"]["restartCount"] == 1 and log(on_failure).strip() == "main ran"


def test_init_containers_get_the_service_account_token_volume_and_downward_resources(runs):
    api = ApiAccess(host="127.0.0.1", port=6443, ca_pem=b"-----BEGIN CERTIFICATE-----\n", token="tok")
    code = "import os; print(open('/var/run/secrets/kubernetes.io/serviceaccount/token').read(), os.environ['MAIN_CPU'])"
    cpu = {"name": "MAIN_CPU", "valueFrom": {"resourceFieldRef": {"containerName": "setup", "resource": "requests.cpu", "divisor": "1m"}}}
    setup = {"name": "setup", "image": TRAINER_IMAGE, **python(code, env=[cpu], resources={"requests": {"cpu": "250m"}})}
    runner = runs.run(pod_with(setup, containers=[python("print('ok')")]), api=api)
    assert log(runner, "setup").split() == ["tok", "250"]


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
