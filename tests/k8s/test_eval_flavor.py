"""Where an eval job lands on an emulated GKE cluster under the Kueue emulator (harness/podrun/kueue/emulator.py, after kueue
v0.19.2, both flavor-matching rules): the shipped k8s/kueue/ objects, the manifests the launcher renders, the eval
pool's node built from docs/deploy-gke.md's own command (its --node-labels and --node-taints), a plain system node
listed first (where a cpu pod selecting nothing would go) and a TPU node. The trainer container runs a fake command.

Through the service: a TPU training job with an evaluation attached (JobSpec.eval), and the eval job the service
makes of its base model, are admitted, the training job into its TPU flavor, the eval job into `cpu-eval`; the eval
pod is bound to the eval node; both Jobs carry `rljob.dev/admitted-to` and say what they are (`rljob.dev/kind`,
`rljob.dev/eval-of`). On the cluster alone, under both rules: the same eval Job, and two controls: the eval pod
without its selector and toleration is admitted into the first TPU flavor (cpu and memory taken from TPU quota, TPU
labels merged in, the pod never scheduled), and a ClusterQueue without the eval flavor admits the eval job nowhere.
"""

from __future__ import annotations

import asyncio
import copy
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.controllers.scheduling import Node
from harness.podrun.kueue.emulator import KueueEmulator
from harness.podrun.manifests import NS, service_accounts, workload
from service.adapters.k8s import pod_template
from service.adapters.k8s.launcher import build_k8s_launcher
from service.app import create_app
from service.domain.records.phases import JobPhase
from tests.deploy import guide_pools

from .conftest import configuration_for, make_eval_spec, make_settings, make_spec
from .test_kueue_routing import shipped_kueue_objects
from .test_service_integration import AUTH, NoProgress, _settings, _wait

pytestmark = pytest.mark.timeout(120)
EVAL_FLAVOR, TPU_ON_DEMAND, TPU_FIRST = "cpu-eval", "tpu-v6e-2x4-on-demand", "tpu-v6e-2x4-reservation"
EVAL_NODE, TPU_NODE = "cpu-eval-0", "tpu-on-demand-0"


def eval_node_from_guide() -> Node:
    """The eval pool's node as the guide's command makes it: its pool, machine type, --node-labels, --node-taints."""
    doc = guide_pools.GUIDE.read_text()
    cmd, flags = guide_pools.eval_pool(doc)
    return Node.gke_cpu(
        EVAL_NODE,
        pool=guide_pools.pool_name(cmd),
        machine_type=flags["--machine-type"],
        labels=guide_pools.node_labels(doc, flags),
        taints=guide_pools.node_taints(flags),
    )


NODES = [Node.gke_cpu("cpu-0"), eval_node_from_guide(), Node.gke_tpu(TPU_NODE, "on-demand")]


def _fake(job_id: str) -> list[str]:
    return ["python", "-c", textwrap.dedent(f"import time; print('{job_id} running', flush=True); time.sleep(600)")]


def _admitted_flavors(kueue: KueueEmulator, job: dict[str, Any] | None) -> dict[str, str]:
    """resource -> flavor of the Job's Workload's admission (one podset)."""
    admission = ((kueue.workload_for(job) if job else None) or {}).get("status", {}).get("admission") or {}
    return {r: f for ps in admission.get("podSetAssignments") or [] for r, f in (ps.get("flavors") or {}).items()}


async def _read(fn: Callable[[], Any]) -> Any:
    return fn()


async def test_through_the_service_the_eval_job_lands_in_the_eval_flavor_and_the_training_job_in_its_tpu_flavor(
    kmock, tmp_path, monkeypatch
):
    monkeypatch.setattr(pod_template, "trainer_command", _fake)
    loop = asyncio.get_running_loop()

    def on_loop(fn: Callable[[], Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(_read(fn), loop).result(timeout=30)

    kueue = KueueEmulator()
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=kueue) as cluster:
        for obj in [*service_accounts(), *shipped_kueue_objects()]:
            await cluster.create(obj)

        def label(job_id: str, key: str) -> str | None:
            return ((cluster.get("Job", NS, job_id) or {}).get("metadata", {}).get("labels") or {}).get(key)

        def node_of(job_id: str) -> str | None:
            pods = [p for p in cluster.pods(NS, **{"job-name": job_id}) if p["status"].get("phase") == "Running"]
            return pods[0]["spec"].get("nodeName") if pods else None

        def scenario() -> dict[str, Any]:
            launcher = build_k8s_launcher(
                make_settings(kueue_queue="rljob-v6e"), sleep=lambda s: None, configuration=configuration_for(kmock)
            )
            app = create_app(_settings(tmp_path / "state"), launcher=launcher, progress=NoProgress())
            with TestClient(app) as client:
                _wait(lambda: client.get("/readyz").status_code == 200, "ready")
                store = app.state.runtime.store

                def placed(job_id: str, flavor: str) -> dict[str, Any]:
                    """Once the service saw the job running in `flavor` and labelled its Job so: what the cluster says."""

                    def running() -> Any:
                        record = store.get(job_id)
                        placement = record.placement if record is not None else None
                        return record is not None and record.phase == JobPhase.RUNNING and placement and placement.flavor == flavor

                    _wait(running, f"{job_id} running in {flavor}", 60)
                    _wait(lambda: on_loop(lambda: label(job_id, "rljob.dev/admitted-to")) == flavor, f"{job_id} labelled {flavor}")
                    return {
                        "placement": store.get(job_id).placement.capacity,
                        "flavors": on_loop(lambda: _admitted_flavors(kueue, cluster.get("Job", NS, job_id))),
                        "node": on_loop(lambda: node_of(job_id)),
                        "kind": on_loop(lambda: label(job_id, "rljob.dev/kind")),
                        "eval-of": on_loop(lambda: label(job_id, "rljob.dev/eval-of")),
                    }

                attached = {"suite": {"name": "arith"}, "base": True, "export": True}
                resp = client.post("/v1/jobs", json=make_spec(eval=attached).model_dump(mode="json"), headers=AUTH)
                assert resp.status_code == 201, resp.text
                train = str(resp.json()["id"])

                def base_eval() -> str | None:
                    # Made by the leader's attached-evals loop (service/domain/rounds/attached_eval_reconciler.py), not by this test.
                    found = client.get("/v1/evals", params={"job_of": train}, headers=AUTH).json()["data"]
                    return next((e["id"] for e in found if e["eval_job"]["checkpoint"]["label"] == "base"), None)

                _wait(lambda: base_eval() is not None, f"the base eval job of {train}", 60)
                return {"train": placed(train, TPU_ON_DEMAND), "eval": placed(str(base_eval()), EVAL_FLAVOR), "train_id": train}

        result = await asyncio.to_thread(scenario)

    tpu = dict.fromkeys(("cpu", "google.com/tpu", "memory"), TPU_ON_DEMAND)
    assert result["train"] == {"placement": "on-demand", "flavors": tpu, "node": TPU_NODE, "kind": "train", "eval-of": None}
    # cpu and memory from the eval flavor's quota, no TPU; on the eval node, not the system node listed first.
    cpu = dict.fromkeys(("cpu", "memory"), EVAL_FLAVOR)
    assert result["eval"] == {"placement": "on-demand", "flavors": cpu, "node": EVAL_NODE, "kind": "eval", "eval-of": result["train_id"]}


def _without_eval_flavor(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A second ClusterQueue and LocalQueue `no-eval`: the shipped ones without the cpu-eval flavor."""
    cq = copy.deepcopy(next(o for o in objs if o["kind"] == "ClusterQueue"))
    cq["metadata"]["name"] = "no-eval"
    for group in cq["spec"]["resourceGroups"]:
        group["flavors"] = [f for f in group["flavors"] if f["name"] != EVAL_FLAVOR]
    lq = copy.deepcopy(next(o for o in objs if o["kind"] == "LocalQueue"))
    lq["metadata"]["name"] = lq["spec"]["clusterQueue"] = "no-eval"
    return [cq, lq]


@pytest.mark.parametrize("rule", ["flavor-keys", "union-keys"])
async def test_the_eval_selector_is_what_keeps_an_eval_job_out_of_the_tpu_flavors(kmock, tmp_path, rule):
    kueue = KueueEmulator(rule=rule)
    jobs = {"eval": "rl-evaljob00001", "bare": "rl-evalbare0001", "no-flavor": "rl-evalnone0001"}
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=kueue) as cluster:
        shipped = shipped_kueue_objects()
        for obj in [*service_accounts(), *shipped, *_without_eval_flavor(shipped)]:
            await cluster.create(obj)
        for name, job_id in jobs.items():
            config_map, job = workload(
                job_id, _fake(job_id), job_spec=make_eval_spec(), kueue_queue="no-eval" if name == "no-flavor" else "rljob-v6e"
            )
            if name == "bare":  # the control: the eval pod as a cpu training pod renders, selecting and tolerating nothing
                pod = job["spec"]["template"]["spec"]
                del pod["nodeSelector"], pod["tolerations"]
            await cluster.create(config_map)
            await cluster.create(job)

        def settled() -> bool:
            eval_bound = any(p["spec"].get("nodeName") for p in cluster.pods(NS, **{"job-name": jobs["eval"]}))
            bare_pods = cluster.pods(NS, **{"job-name": jobs["bare"]})
            none_job = cluster.get("Job", NS, jobs["no-flavor"])
            reserved = kueue.condition(
                "Workload", NS, (kueue.workload_for(none_job) or {}).get("metadata", {}).get("name", "-"), "QuotaReserved"
            )
            return eval_bound and bool(bare_pods) and bare_pods[0]["status"].get("conditions") is not None and reserved is not None

        await cluster.wait_for(settled, "the eval pod bound, the bare pod tried, the flavorless job evaluated", timeout_s=60)
        got = {name: _admitted_flavors(kueue, cluster.get("Job", NS, job_id)) for name, job_id in jobs.items()}
        (eval_pod,) = cluster.pods(NS, **{"job-name": jobs["eval"]})
        (bare_pod,) = cluster.pods(NS, **{"job-name": jobs["bare"]})
        none_wl = kueue.workload_for(cluster.get("Job", NS, jobs["no-flavor"]) or {})
        assert none_wl is not None
        no_flavor = kueue.condition("Workload", NS, none_wl["metadata"]["name"], "QuotaReserved")
        no_flavor_pods = cluster.pods(NS, **{"job-name": jobs["no-flavor"]})

    assert got["eval"] == dict.fromkeys(("cpu", "memory"), EVAL_FLAVOR), got
    assert eval_pod["spec"]["nodeName"] == EVAL_NODE
    # Without the selector, the first flavor of the pool's order takes the eval job's cpu and memory; Kueue merges
    # its TPU labels into the pod, which no node then takes (the TPU node needs a TPU, the others lack the labels).
    assert got["bare"] == dict.fromkeys(("cpu", "memory"), TPU_FIRST), got
    assert bare_pod["spec"]["nodeSelector"]["rljob.dev/capacity"] == "reservation"
    assert not bare_pod["spec"].get("nodeName")
    assert {c["type"]: c["status"] for c in bare_pod["status"]["conditions"]}.get("PodScheduled") == "False"
    # No eval flavor in the queue: every TPU flavor refuses it on rljob.dev/capacity; it waits, nothing runs.
    assert got["no-flavor"] == {} and not no_flavor_pods
    assert no_flavor is not None and no_flavor["status"] == "False", no_flavor
    assert "doesn't match node affinity" in no_flavor["message"] and EVAL_FLAVOR not in no_flavor["message"], no_flavor


def _shipped_chain() -> Any:
    """The shipped ClusterQueue's chain as kueue_chain.read_chain builds it (without the reads)."""
    from decimal import Decimal

    from service.adapters.k8s import kueue_setup

    objs = shipped_kueue_objects()
    flavors = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ResourceFlavor"}
    cq = next(o for o in objs if o["kind"] == "ClusterQueue")
    groups = [
        kueue_setup.ResourceGroup(
            covered, [kueue_setup.make_flavor(n, q.get("google.com/tpu", Decimal(0)), flavors[n], q) for n, q in group_flavors]
        )
        for covered, group_flavors in kueue_setup.group_quotas(cq)
    ]
    return kueue_setup.QueueChain("rljob-v6e", cq["metadata"]["name"], [f for g in groups for f in g.flavors], True, [], groups)


def test_the_doctor_checks_that_the_eval_flavor_holds_one_eval_pod():
    from service.adapters.k8s_cluster.doctor_quota import quota_checks

    def eval_line(**settings: Any) -> Any:
        lines = quota_checks(_shipped_chain(), make_settings(kueue_queue="rljob-v6e", **settings))
        (line,) = [x for x in lines if x.name == f"quota of flavor {EVAL_FLAVOR} (ClusterQueue rljob-v6e)"]
        return line

    ok = eval_line()
    assert (ok.status, ok.message) == ("ok", "holds an eval job (2 cpu, 8Gi memory)")
    short = eval_line(cpu_job_memory="64Gi")  # the shipped eval quota is 48Gi
    assert short.status == "fail" and "its memory quota is 48Gi, the job needs 64Gi" in short.message, short
    assert "RLJOB_K8S_CPU_JOB_MEMORY" in short.fix


def test_without_kueue_the_doctor_says_the_eval_pool_takes_no_pod():
    from kubernetes.client import V1Node, V1ObjectMeta

    from service.adapters.k8s_cluster.doctor_pools import capacity_pool_checks

    node = eval_node_from_guide()
    lines = capacity_pool_checks([V1Node(metadata=V1ObjectMeta(name=node.name, labels=node.labels))])
    (line,) = [x for x in lines if x.name == f"nodes rljob.dev/capacity={EVAL_FLAVOR}"]
    assert line.status == "warn" and "only eval jobs queued by Kueue select" in line.message
    assert not [x for x in lines if "which is no kind" in x.message], "the eval pool is a pool rljob knows"
