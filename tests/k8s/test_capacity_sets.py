"""One spec, several capacities, through the whole service on the emulated cluster with Kueue's admission
(harness/podrun/kueue/emulator.py, after kueue v0.19.2 and v0.20.0's differences; both flavor-matching rules): the
shipped ResourceFlavors and ClusterQueue (k8s/kueue/, flavors in the pool's order: reservation, spot, on-demand, flex-start), spot quota for
one v6e-8 and on-demand quota for two, one spot node and two on-demand nodes carrying GKE's labels and taints.
The trainer container runs a fake command (it sleeps until stopped); everything else is the rendered manifest.

The story: A asks for [spot, on-demand] and lands on spot while spot has quota; B (spot only) then waits; C
([spot, on-demand]) lands on on-demand, spot being full. The spot VM under A shuts down: A's attempt was
disrupted, so the service gives its workload back to the queue instead of retrying it in place on spot; B, waiting
longer, takes the spot quota, and A comes back on on-demand. A's status, its workload's label and its cost follow:
the cost is checked against the phase log and the price table, not against the code that computes it.
"""

from __future__ import annotations

import asyncio
import copy
import textwrap
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.controllers.scheduling import Node
from harness.podrun.kueue.emulator import KueueEmulator
from harness.podrun.manifests import NS, service_accounts
from service.adapters.k8s import pod_template
from service.adapters.k8s.launcher import build_k8s_launcher
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.domain.cost.usage import DEFAULT_PRICES_USD_PER_CHIP_HOUR
from service.domain.records.errors import InvalidRequest
from trainer.contract import JobSpec

from .conftest import configuration_for, make_settings, make_spec
from .test_kueue_routing import RULE_VERSIONS, shipped_kueue_objects
from .test_service_integration import AUTH, NoProgress, _settings, _wait

pytestmark = pytest.mark.timeout(400)  # the waits below add up to 330 s; it takes about 20
SPOT, ON_DEMAND = "tpu-v6e-2x4-spot", "tpu-v6e-2x4-on-demand"
NODES = [Node.gke_tpu("tpu-spot-0", "spot"), Node.gke_tpu("tpu-od-0", "on-demand"), Node.gke_tpu("tpu-od-1", "on-demand")]
# One ct6e-standard-8t's worth of quota per node: cpu and memory under its allocatable, 8 chips.
ONE_NODE = [
    {"name": "cpu", "nominalQuota": 170},
    {"name": "memory", "nominalQuota": "1300Gi"},
    {"name": "google.com/tpu", "nominalQuota": 8},
]


def _kueue_objects() -> list[dict[str, Any]]:
    objs = copy.deepcopy(shipped_kueue_objects())
    (cq,) = [o for o in objs if o["kind"] == "ClusterQueue"]
    for flavor in cq["spec"]["resourceGroups"][0]["flavors"]:
        if flavor["name"] == SPOT:
            flavor["resources"] = copy.deepcopy(ONE_NODE)
        if flavor["name"] == ON_DEMAND:
            flavor["resources"] = [{**r, "nominalQuota": {"cpu": 340, "memory": "2600Gi"}.get(r["name"], 16)} for r in ONE_NODE]
    return objs


def _fake_trainer(job_id: str) -> list[str]:
    return ["python", "-c", textwrap.dedent(f"import time; print('{job_id} training', flush=True); time.sleep(600)")]


def _body(capacity: str | list[str], name: str) -> dict[str, Any]:
    body = make_spec().model_dump(mode="json")
    body["name"] = name
    body["hardware"]["capacity"] = capacity
    return body


def _job(client: TestClient, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
    return job


def _running_on(client: TestClient, job_id: str, flavor: str) -> dict[str, Any] | None:
    job = _job(client, job_id)
    placed = job.get("placement") or {}
    return job if job["phase"] == "RUNNING" and placed.get("flavor") == flavor else None


def _events(state: Path, job_id: str) -> tuple[list[dict[str, Any]], int]:
    """The job's event log as stored ({kind, time, data}), and its resumes."""
    store = SqlJobStore(_settings(state).effective_database_url)
    try:
        record = store.get(job_id)
        assert record is not None
        events = [{"kind": e.kind, "time": e.time, "data": e.data} for e in store.events_after(0, job_id=job_id)]
        return events, record.resumes
    finally:
        store.close()


@pytest.mark.parametrize(("rule", "version"), RULE_VERSIONS)
async def test_a_capacity_set_lands_by_the_pools_order_and_comes_back_on_another_kind_after_a_spot_preemption(
    kmock, tmp_path, monkeypatch, rule, version
):
    monkeypatch.setattr(pod_template, "trainer_command", _fake_trainer)
    loop = asyncio.get_running_loop()

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=30)

    kueue = KueueEmulator(rule=rule, version=version)
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=kueue) as cluster:
        for obj in [*service_accounts(), *_kueue_objects()]:
            await cluster.create(obj)

        def node_of(job_id: str) -> str | None:
            pods = [p for p in cluster.pods(NS, **{"job-name": job_id}) if p["status"].get("phase") == "Running"]
            return pods[0]["spec"].get("nodeName") if pods else None

        def admitted_to(job_id: str) -> str | None:
            job = cluster.get("Job", NS, job_id)
            return ((job or {}).get("metadata", {}).get("labels") or {}).get("rljob.dev/admitted-to")

        def scenario() -> dict[str, Any]:
            launcher = build_k8s_launcher(
                make_settings(kueue_queue="rljob-v6e", termination_grace_s=30),
                sleep=lambda s: None,
                configuration=configuration_for(kmock),
            )
            app = create_app(_settings(tmp_path / "state"), launcher=launcher, progress=NoProgress())
            with TestClient(app) as client:
                _wait(lambda: client.get("/readyz").status_code == 200, "ready")

                def submit(capacity: str | list[str], name: str) -> str:
                    resp = client.post("/v1/jobs", json=_body(capacity, name), headers=AUTH)
                    assert resp.status_code == 201, resp.text
                    return str(resp.json()["id"])

                a = submit(["spot", "on-demand"], "a-spot-or-on-demand")
                first = _wait(lambda: _running_on(client, a, SPOT), "A running on spot", 60)
                assert first["placement"]["capacity"] == "spot" and first["usage"]["capacity"] == "spot"
                assert on_loop(_read(lambda: node_of(a))) == "tpu-spot-0"
                _wait(lambda: on_loop(_read(lambda: admitted_to(a))) == SPOT, "A's Job labelled with its flavor")

                b = submit("spot", "b-spot-only")
                waiting = _wait(
                    lambda: (
                        (j := _job(client, b))["phase"] == "QUEUED"
                        and (j["queue"] or {}).get("reason") not in (None, "NoWorkload", "PendingEvaluation")
                        and j
                    ),
                    "B waiting for spot quota, once Kueue's scheduler has tried it",
                )
                # Kueue says Pending (v0.19.2) or WaitingForQuota (v0.20.0; the spot flavor's reason is the least
                # severe, the other flavors' NoMatchingFlavor): rljob says WaitingForQuota, in words, on both.
                assert waiting["queue"]["reason"] == "WaitingForQuota", waiting["queue"]
                assert waiting["queue"]["message"].startswith("waiting for quota: "), waiting["queue"]
                assert f"insufficient unused quota for google.com/tpu in flavor {SPOT}" in waiting["queue"]["message"]
                c = submit(["spot", "on-demand"], "c-spot-or-on-demand")
                _wait(lambda: _running_on(client, c, ON_DEMAND), "C running on on-demand: spot is full", 60)
                assert _job(client, b)["phase"] == "QUEUED", "B still waits: C did not take spot from it"

                time.sleep(1.0)  # some billed time on spot
                ended = on_loop(cluster.shut_down_node("tpu-spot-0"))
                assert ended, "A's pod was on the spot node"
                back = _wait(lambda: _running_on(client, a, ON_DEMAND), "A back on on-demand", 90)
                _wait(lambda: _job(client, b)["phase"] == "RUNNING", "B took the spot quota A gave back", 60)
                assert _job(client, b)["placement"]["flavor"] == SPOT
                assert on_loop(_read(lambda: node_of(a))) in {"tpu-od-0", "tpu-od-1"} - {on_loop(_read(lambda: node_of(c)))}
                _wait(lambda: on_loop(_read(lambda: admitted_to(a))) == ON_DEMAND, "A's Job relabelled")
                time.sleep(1.0)  # some billed time on on-demand
                return {"a": _job(client, a), "id": a, "back": back}

        result = await asyncio.to_thread(scenario)

    job = result["a"]
    events, resumes = _events(tmp_path / "state", result["id"])
    assert resumes == 1, "the requeue is one resume"
    assert job["placement"] == {"capacity": "on-demand", "flavor": ON_DEMAND, "billed_s": job["placement"]["billed_s"], "stranded": []}
    placements = [(e["data"]["capacity"], e["data"]["flavor"]) for e in events if e["kind"] == "placement"]
    assert placements == [("spot", SPOT), ("on-demand", ON_DEMAND)], placements
    assert any("back to the queue" in (e["data"].get("message") or "") for e in events if e["kind"] == "message")
    # The cost, from the phase log and the price table: RUNNING time before the requeue at spot's price, after it at
    # on-demand's (queued and launching time is not billed).
    spot_s, od_s = _running_seconds(events, until=datetime.fromisoformat(job["usage"]["as_of"]))
    prices = DEFAULT_PRICES_USD_PER_CHIP_HOUR["v6e"]
    expected = 8 * (spot_s * prices["spot"] + od_s * prices["on-demand"]) / 3600
    assert spot_s > 0.5 and od_s > 0.5, (spot_s, od_s)
    assert job["usage"]["capacity"] == "on-demand" and job["usage"]["price_usd_per_chip_hour"] == prices["on-demand"]
    assert job["usage"]["cost_usd"] == pytest.approx(expected, abs=1e-4)
    # Not what one price for the whole time would give: the spot share was charged at spot's price.
    assert job["usage"]["cost_usd"] < 8 * (spot_s + od_s) * prices["on-demand"] / 3600 - 1e-4


async def _read(fn: Callable[[], Any]) -> Any:
    return fn()


def _running_seconds(events: list[dict[str, Any]], until: datetime) -> tuple[float, float]:
    """Seconds in RUNNING before and after the first time the job left it, from the `phase` events."""
    spans: list[float] = []
    entered: datetime | None = None
    for e in events:
        if e["kind"] != "phase":
            continue
        at = e["time"]
        if e["data"]["phase"] == "RUNNING":
            entered = at
        elif entered is not None:
            spans.append((at - entered).total_seconds())
            entered = None
    if entered is not None:
        spans.append((until - entered).total_seconds())
    assert len(spans) == 2, spans
    return spans[0], spans[1]


def test_a_capacity_set_without_a_kueue_queue_is_refused_at_submit(kmock):
    """Nothing would order the kinds nor report which one a pod landed on, so status and price could not follow it."""
    launcher = build_k8s_launcher(make_settings(), sleep=lambda s: None, configuration=configuration_for(kmock))
    body = make_spec().model_dump()
    spec = JobSpec.model_validate({**body, "hardware": {**body["hardware"], "capacity": ["spot", "on-demand"]}})
    with pytest.raises(InvalidRequest) as refused:
        launcher.check_submittable(spec)
    assert refused.value.loc == ("body", "hardware", "capacity") and "needs a Kueue queue" in str(refused.value)
    launcher.check_submittable(make_spec())  # one kind: fine without Kueue
    assert not list(kmock), "refused before any call to the cluster"
