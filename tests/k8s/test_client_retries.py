"""K8sClient's retry policy with injected sleep and clock: only transient errors are retried."""

from __future__ import annotations

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from service.adapters.k8s import ApiUnavailable
from service.adapters.k8s.client import K8sClient


class Flaky:
    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


def _client(sleeps: list[float], attempts: int = 4) -> K8sClient:
    now = [0.0]

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    return K8sClient(
        core=None,
        batch=None,
        custom=None,
        namespace="rljob",
        sleep=sleep,
        clock=lambda: now[0],
        attempts=attempts,
        backoff_s=1.0,
        backoff_max_s=3.0,
    )


@pytest.mark.parametrize(
    "error",
    [
        ApiException(status=429),
        ApiException(status=500),
        ApiException(status=503),
        urllib3.exceptions.ProtocolError("reset"),
        ConnectionResetError(),
    ],
)
def test_transient_errors_are_retried_with_bounded_backoff(error) -> None:
    sleeps: list[float] = []
    fn = Flaky(error, error, error)
    assert _client(sleeps).call("read Job", fn) == "ok"
    assert fn.calls == 4 and sleeps == [1.0, 2.0, 3.0]  # exponential, capped at backoff_max_s


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422])
def test_other_errors_are_not_retried(status: int) -> None:
    sleeps: list[float] = []
    fn = Flaky(ApiException(status=status))
    with pytest.raises(ApiException):
        _client(sleeps).call("create Job", fn)
    assert fn.calls == 1 and sleeps == []


def test_budget_exhausted_raises_api_unavailable_with_cause() -> None:
    sleeps: list[float] = []
    fn = Flaky(*[ApiException(status=503)] * 10)
    with pytest.raises(ApiUnavailable, match="create Job.*4 attempts") as info:
        _client(sleeps).call("create Job", fn)
    assert isinstance(info.value.__cause__, ApiException) and fn.calls == 4


def test_read_maps_404_to_none() -> None:
    assert _client([]).read("read Job", Flaky(ApiException(status=404))) is None
