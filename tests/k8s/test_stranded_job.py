"""Issue 55 section 2, what the user sees: an admitted job whose pod no node of its flavor can take, through the whole
service on the emulated cluster (Kueue v0.19.2 and v0.20.0 rules, v0.20's unscheduledTimeout gate off as it is by
default). The pool is test_kueue_unscheduled_timeout's: the shipped k8s/kueue/ objects, a reservation node made
without the `cloud.google.com/reservation-name` label the reservation flavor names, and a spot node; the job asks for
[reservation, spot] and Kueue admits it to the reservation flavor, where its pod is Unschedulable.

First the job says why its pod waits (reason Unschedulable); once the pod has been unschedulable for
RLJOB_K8S_STRANDED_AFTER_S (counted from the pod's PodScheduled=False lastTransitionTime, which the emulated
scheduler keeps as kube-scheduler does), its message says it is stranded, on which flavor, and what to do, logged
once, and that log entry is a `job.stranded` webhook.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.kueue import KueueEmulator
from harness.podrun.manifests import service_accounts
from harness.podrun.scheduling import Node
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


def _body() -> dict[str, Any]:
    body = make_spec().model_dump(mode="json")
    body["name"] = "stranded-on-reservation"
    body["hardware"]["capacity"] = ["reservation", "spot"]
    body["hardware"]["reservation"] = RESERVATION
    return body


@pytest.mark.parametrize("version", ["v0.19.2", "v0.20.0"])
async def test_a_job_whose_pod_its_flavor_cannot_run_is_reported_stranded_once(kmock, tmp_path, monkeypatch, version):
    monkeypatch.setattr(pod_template, "trainer_command", _fake_trainer)
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=KueueEmulator(version=version)) as cluster:
        for obj in [*service_accounts(), *shipped_kueue_objects()]:
            await cluster.create(obj)

        def scenario() -> tuple[str, dict[str, Any], dict[str, Any]]:
            launcher = build_k8s_launcher(
                make_settings(kueue_queue="rljob-v6e", stranded_after_s=STRANDED_AFTER_S),
                sleep=lambda s: None,
                configuration=configuration_for(kmock),
            )
            app = create_app(_settings(tmp_path / "state"), launcher=launcher, progress=NoProgress())
            with TestClient(app) as client:
                _wait(lambda: client.get("/readyz").status_code == 200, "ready")
                resp = client.post("/v1/jobs", json=_body(), headers=AUTH)
                assert resp.status_code == 201, resp.text
                job_id = str(resp.json()["id"])

                def job() -> dict[str, Any]:
                    found: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
                    return found

                waiting = _wait(lambda: (j := job())["message"].startswith("no node can run the trainer pod") and j, "unschedulable", 60)
                started_waiting = time.monotonic()
                stranded = _wait(lambda: (j := job())["message"].startswith("stranded:") and j, "stranded", 60)
                assert time.monotonic() - started_waiting >= STRANDED_AFTER_S - 2, "said only once the limit had passed"
                time.sleep(2.0)  # more observations of the same stranded pod: nothing more is logged
                return job_id, waiting, {**stranded, "later": job()}

        job_id, waiting, stranded = await asyncio.to_thread(scenario)

    assert waiting["phase"] == "LAUNCHING" and stranded["phase"] == "LAUNCHING", "admitted, holding its quota, not running"
    message = stranded["message"]
    assert f"admitted to Kueue flavor {FLAVOR['reservation']}" in message
    assert f"(limit {STRANDED_AFTER_S / 60:g} min, RLJOB_K8S_STRANDED_AFTER_S)" in message
    assert "cloud.google.com/reservation-name=" in message, "what the pod needs of a node"
    assert "without that kind in hardware.capacity" in message
    assert stranded["later"]["message"] == message

    store = SqlJobStore(_settings(tmp_path / "state").effective_database_url)
    try:
        record = store.get(job_id)
        assert record is not None
        logged = [e for e in store.events_after(0, job_id=job_id) if e.kind == "message" and e.data.get("reason") == "Stranded"]
        assert len(logged) == 1, [e.data for e in logged]
        sent = notice_for(logged[0], record, frozenset(WEBHOOK_EVENTS))
        assert sent is not None and sent[0] == "job.stranded"
        assert sent[1].text.startswith(f"job {job_id} (stranded-on-reservation, team ml) is stranded: admitted to Kueue flavor")
        unschedulable = [e for e in store.events_after(0, job_id=job_id) if e.kind == "message" and e.data.get("reason") == "Unschedulable"]
        assert unschedulable and unschedulable[0].seq < logged[0].seq, "the pod's reason first, stranded after"
        assert notice_for(unschedulable[0], record, frozenset(WEBHOOK_EVENTS)) is None, "other messages are not sent"
    finally:
        store.close()
