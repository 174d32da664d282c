"""Issue 55 section 2, what the user sees: admitted jobs whose pod no node of their flavor can take, through the whole
service on the emulated cluster (Kueue v0.19.2 and v0.20.0 rules, v0.20's unscheduledTimeout gate off as it is by
default). The pool is test_kueue_unscheduled_timeout's: the shipped k8s/kueue/ objects (reservation quota for one
v6e-8), a reservation node made without the `cloud.google.com/reservation-name` label the reservation flavor names,
and a spot node.

C asks for [reservation, spot]: Kueue admits it to the reservation flavor, where its pod is Unschedulable. First the
job says why its pod waits; once the pod has been unschedulable for RLJOB_K8S_STRANDED_AFTER_S (counted from its
PodScheduled=False lastTransitionTime, which the emulated scheduler keeps as kube-scheduler does), the service gives
it back to the queue without the reservation kind (Kueue alone would readmit it from its first flavor, the
reservation again: test_kueue_unscheduled_timeout), and it runs on spot. S then asks for the reservation alone:
nothing else is left for it, so it stays admitted and its message says it is stranded, on which flavor and what to
do, logged once; that log entry is a `job.stranded` webhook.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.controllers.scheduling import Node
from harness.podrun.kueue.emulator import KueueEmulator
from harness.podrun.manifests import service_accounts
from service.adapters.k8s import pod_template
from service.adapters.k8s.launcher import build_k8s_launcher
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.domain.webhooks.webhooks import WEBHOOK_EVENTS, notice_for

from .conftest import configuration_for, make_settings, make_spec
from .test_kueue_routing import FLAVOR, RESERVATION, shipped_kueue_objects
from .test_service_integration import AUTH, NoProgress, _settings, _wait

pytestmark = pytest.mark.timeout(200)
NODES = [Node.gke_tpu("tpu-reservation-0", "reservation"), Node.gke_tpu("tpu-spot-0", "spot")]
STRANDED_AFTER_S = 4


def _fake_trainer(job_id: str) -> list[str]:
    return ["python", "-c", textwrap.dedent("import time; time.sleep(600)")]


def _body(name: str, capacity: list[str]) -> dict[str, Any]:
    body = make_spec().model_dump(mode="json")
    body["name"] = name
    body["hardware"]["capacity"] = capacity
    body["hardware"]["reservation"] = RESERVATION
    return body


@pytest.mark.parametrize("version", ["v0.19.2", "v0.20.0"])
async def test_a_stranded_job_leaves_its_flavor_for_the_next_kind_or_says_it_is_stranded(kmock, tmp_path, monkeypatch, version):
    monkeypatch.setattr(pod_template, "trainer_command", _fake_trainer)
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=KueueEmulator(version=version)) as cluster:
        for obj in [*service_accounts(), *shipped_kueue_objects()]:
            await cluster.create(obj)

        def scenario() -> dict[str, Any]:
            launcher = build_k8s_launcher(
                make_settings(kueue_queue="rljob-v6e", stranded_after_s=STRANDED_AFTER_S),
                sleep=lambda s: None,
                configuration=configuration_for(kmock),
            )
            app = create_app(_settings(tmp_path / "state"), launcher=launcher, progress=NoProgress())
            with TestClient(app) as client:
                _wait(lambda: client.get("/readyz").status_code == 200, "ready")

                def submit(name: str, capacity: list[str]) -> str:
                    resp = client.post("/v1/jobs", json=_body(name, capacity), headers=AUTH)
                    assert resp.status_code == 201, resp.text
                    return str(resp.json()["id"])

                def job(job_id: str) -> dict[str, Any]:
                    found: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
                    return found

                def says(job_id: str, prefix: str) -> dict[str, Any] | None:
                    return (j := job(job_id))["message"].startswith(prefix) and j or None

                c = submit("c-reservation-or-spot", ["reservation", "spot"])
                waiting = _wait(lambda: says(c, "no node can run the trainer pod"), "C unschedulable on reservation", 60)
                started_waiting = time.monotonic()
                running = _wait(lambda: (j := job(c))["phase"] == "RUNNING" and j, "C running on spot", 90)
                assert time.monotonic() - started_waiting >= STRANDED_AFTER_S - 2, "left only once the limit had passed"

                s = submit("s-reservation-only", ["reservation"])
                _wait(lambda: says(s, "no node can run the trainer pod"), "S unschedulable on reservation", 60)
                stranded = _wait(lambda: says(s, "stranded:"), "S stranded", 60)
                time.sleep(2.0)  # more observations of the same stranded pod: nothing more is logged, nothing relaunched
                return {"c": c, "s": s, "c_waiting": waiting, "c_running": running, "s_stranded": stranded, "s_later": job(s)}

        seen = await asyncio.to_thread(scenario)

    assert seen["c_waiting"]["phase"] == "LAUNCHING", "admitted, holding its quota, not running"
    placement = seen["c_running"]["placement"]
    assert (placement["capacity"], placement["flavor"], placement["stranded"]) == ("spot", FLAVOR["spot"], ["reservation"])

    stranded = seen["s_stranded"]
    assert stranded["phase"] == "LAUNCHING" and seen["s_later"]["phase"] == "LAUNCHING", "nothing left to go to: it stays"
    message = stranded["message"]
    assert f"admitted to Kueue flavor {FLAVOR['reservation']}" in message
    assert f"(limit {STRANDED_AFTER_S / 60:g} min, RLJOB_K8S_STRANDED_AFTER_S)" in message
    assert "cloud.google.com/reservation-name=" in message, "what the pod needs of a node"
    assert "without that kind in hardware.capacity" in message
    assert seen["s_later"]["message"] == message

    store = SqlJobStore(_settings(tmp_path / "state").effective_database_url)
    try:
        c_events = list(store.events_after(0, job_id=seen["c"]))
        placements = [(e.data["capacity"], e.data["flavor"]) for e in c_events if e.kind == "placement"]
        assert placements == [("reservation", FLAVOR["reservation"]), ("spot", FLAVOR["spot"])], placements
        left = [e.data["message"] for e in c_events if e.kind == "message" and e.data.get("reason") == "Requeued"]
        assert left == [
            f"stranded on {FLAVOR['reservation']}: no node there took its pod; back to the queue without reservation, "
            "so the pool places it on the next kind of its hardware.capacity"
        ], left
        record = store.get(seen["s"])
        assert record is not None
        s_events = list(store.events_after(0, job_id=seen["s"]))
        logged = [e for e in s_events if e.kind == "message" and e.data.get("reason") == "Stranded"]
        assert len(logged) == 1, [e.data for e in logged]
        sent = notice_for(logged[0], record, frozenset(WEBHOOK_EVENTS))
        assert sent is not None and sent[0] == "job.stranded"
        assert sent[1].text.startswith(f"job {seen['s']} (s-reservation-only, team ml) is stranded: admitted to Kueue flavor")
        unschedulable = [e for e in s_events if e.kind == "message" and e.data.get("reason") == "Unschedulable"]
        assert unschedulable and unschedulable[0].seq < logged[0].seq, "the pod's reason first, stranded after"
        assert notice_for(unschedulable[0], record, frozenset(WEBHOOK_EVENTS)) is None, "other messages are not sent"
    finally:
        store.close()
