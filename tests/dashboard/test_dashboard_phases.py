"""The dashboard learns the phases from the service (GET /v1/phases) before any signed-in view, says
so when it cannot, and retries: what it shows follows the service's answer, not a copy of its own."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from harness.live_server import LiveService

from .test_dashboard_browser import sign_in

pytestmark = pytest.mark.browser


def test_the_board_waits_for_the_services_phases_and_retries(page: Page, live_service: LiveService) -> None:
    served = httpx.get(f"{live_service.url}/v1/phases").json()
    answers = [
        {"status": 503, "json": {"detail": "phases unavailable for a moment"}},
        # The service's phases in another order: the filter must show exactly what the service said.
        {"status": 200, "json": {**served, "phases": served["phases"][::-1]}},
    ]
    requests: list[str] = []

    def answer(route: Route) -> None:
        requests.append(route.request.url)
        route.fulfill(**answers[min(len(requests), len(answers)) - 1])

    page.route("**/v1/phases", answer)
    sign_in(page, live_service)
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("The service returned an error")
    expect(alert).to_contain_text("phases unavailable for a moment")
    expect(page.locator("table.jobs")).to_have_count(0)

    page.get_by_role("button", name="Try again").click()
    options = page.locator("#phase-filter option")
    expect(options).to_have_text(["All phases", "Active (not finished)", *served["phases"][::-1]])
    assert len(requests) == 2

    page.evaluate("window.location.hash = '#/?phase=RUNNING'")  # a route change does not ask again
    expect(page.locator("#phase-filter")).to_have_value("RUNNING")
    assert len(requests) == 2
    page.reload()  # a new page load does
    expect(options).to_have_count(2 + len(served["phases"]))
    assert len(requests) == 3
