"""Webhook HTTP: one POST per attempt (the WebhookTransport port, service/domain/webhook_models.py).

Never follows a redirect (a 3xx is the attempt's answer, and the dispatcher fails the delivery: an endpoint that
redirects could send signed bodies anywhere). Connect and read have timeouts of their own, so a receiver that
accepts and never answers holds its sender for at most those; at most MAX_RESPONSE_BYTES of an answer are read.
Errors name the host, never the URL (a Slack webhook URL is a credential).
"""

from __future__ import annotations

import httpx

from service.domain.webhook_models import SendResult

MAX_RESPONSE_BYTES = 4096  # only the status matters; a snippet of a refusal helps whoever reads last_error


class HttpWebhookTransport:
    def __init__(self) -> None:
        # One client for every endpoint (making one costs ~0.1 s: its TLS context), thread-safe. No proxy from the
        # environment (trust_env off: a webhook goes where the admin configured it), no redirect followed, and no cap on
        # connections: a receiver that holds its connections must not take another endpoint's place in a pool.
        self._client = httpx.Client(follow_redirects=False, trust_env=False, limits=httpx.Limits(max_connections=None))

    def post(self, url: str, body: bytes, headers: dict[str, str], *, connect_timeout_s: float, read_timeout_s: float) -> SendResult:
        timeout = httpx.Timeout(connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=connect_timeout_s)
        host = httpx.URL(url).host
        try:
            with self._client.stream("POST", url, content=body, headers=headers, timeout=timeout) as response:
                snippet = b""
                for chunk in response.iter_bytes():
                    snippet += chunk
                    if len(snippet) >= MAX_RESPONSE_BYTES:
                        break
                location = response.headers.get("location") if response.is_redirect else None
                error = None if response.is_success else f"{host} answered {response.status_code}: {_text(snippet)}"
                return SendResult(response.status_code, error, location)
        except httpx.TimeoutException as e:
            return SendResult(None, f"{host} did not answer in time ({e.__class__.__name__})")
        except httpx.HTTPError as e:
            return SendResult(None, f"{host} could not be reached ({e.__class__.__name__}: {_text(str(e).replace(url, host).encode())})")


def _text(raw: bytes) -> str:
    return raw[:200].decode("utf-8", "replace").replace("\n", " ").strip()
