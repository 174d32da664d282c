"""A loopback HTTP proxy in front of fake-gcs-server that answers chosen requests with 403
(and can add a fixed delay per request, for benchmarks that want a network round trip).

fake-gcs-server has no IAM, retention policies or object holds (patching them is accepted and
ignored), so "this principal may not create/delete objects here" is emulated one layer up: the proxy
forwards everything to the emulator except requests a rule denies, which get the status and JSON
error body real GCS sends for a missing permission.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

PRINCIPAL = "rljob-trainer@rljob-test.iam.gserviceaccount.com"
_UPLOAD = re.compile(r"^/upload/storage/v1/b/(?P<bucket>[^/]+)/o")
_OBJECT = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<name>[^?]+)")
_LIST = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o/?$")


def gcs_permission(method: str, path: str) -> tuple[str | None, str | None]:
    """(bucket, IAM permission) a JSON-API request needs, for the requests the adapter sends."""
    route = urlsplit(path).path
    if m := _UPLOAD.match(route):
        return m["bucket"], "storage.objects.create"
    if m := _OBJECT.match(route):
        perm = {"DELETE": "storage.objects.delete", "GET": "storage.objects.get"}.get(method, "storage.objects.update")
        return m["bucket"], perm
    if m := _LIST.match(route):
        return m["bucket"], "storage.objects.list"
    return None, None


def forbidden_body(permission: str) -> bytes:
    message = (
        f"{PRINCIPAL} does not have {permission} access to the Google Cloud Storage object. "
        f"Permission '{permission}' denied on resource (or it may not exist)."
    )
    if permission == "storage.objects.list":
        message = message.replace("object", "bucket")
    body = {"error": {"code": 403, "message": message, "errors": [{"message": message, "domain": "global", "reason": "forbidden"}]}}
    return json.dumps(body).encode()


class ForbiddingProxy:
    def __init__(self, upstream_port: int, denied: Callable[[str, str | None], bool] = lambda p, b: False, *, delay_s: float = 0.0) -> None:
        """delay_s: added before forwarding each request, a stand-in for the round trip to real GCS."""
        self.denied_requests: list[tuple[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                bucket, permission = gcs_permission(self.command, self.path)
                if permission and denied(permission, bucket):
                    proxy.denied_requests.append((self.command, self.path))
                    payload = forbidden_body(permission)
                    self.send_response(403)
                    self.send_header("Content-Type", "application/json; charset=UTF-8")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if delay_s:
                    time.sleep(delay_s)
                conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> ForbiddingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
