"""The service image's ENTRYPOINT, run as written (the project venv standing in for the image).

Before create_app_from_env existed, uvicorn called `create_app()` with no arguments and the process died
at start ("missing 1 required positional argument"): matching the string in the Dockerfile proved nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from service.free_port import free_port
from tests.deploy.deploy_support import ROOT

DOCKERFILE = ROOT / "docker" / "service.Dockerfile"


def entrypoint() -> list[str]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    found = re.search(r"^ENTRYPOINT\s+(\[.*\])\s*$", text, re.MULTILINE)
    assert found, "the service Dockerfile has no exec-form ENTRYPOINT"
    return json.loads(found.group(1))


def test_the_service_images_entrypoint_starts_and_answers_its_probes(tmp_path):
    argv = entrypoint()
    assert argv[0] == "uvicorn"
    port = free_port()
    # Only where it listens changes: loopback (tests never bind 0.0.0.0) and a free port.
    argv = [str(Path(sys.executable).with_name("uvicorn")), *argv[1:]]
    argv[argv.index("--host") + 1], argv[argv.index("--port") + 1] = "127.0.0.1", str(port)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
    env.update(
        RLJOB_ENVIRONMENT="dev",
        RLJOB_LAUNCHER="local",
        RLJOB_STATE_DIR=str(tmp_path / "state"),
        RLJOB_BOOTSTRAP_TOKEN="rlj_entrypoint-test-token-00000000000000",
        PYTHONPATH=str(ROOT),
    )
    server = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, ready = time.monotonic() + 60, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                    ready = json.loads(response.read())
                    break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.3)
        assert server.poll() is None, server.stdout.read().decode()[-3000:]
        assert ready is not None and ready.get("ready") is True, ready
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            assert response.status == 200
    finally:
        server.terminate()
        server.wait(timeout=30)
