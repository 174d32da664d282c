"""/v1/webhooks/deliveries: the state of webhook deliveries (service/domain/webhooks/webhook_dispatch.py), for admins only.

Shows each delivery's endpoint by name, never its URL or secret (a Slack webhook URL is a credential)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool

from service.api.deps import CallerDep, WebhookQueueDep
from service.api.errors import error_responses
from service.domain.records.errors import AdminOnly
from service.domain.webhooks.webhook_models import DeliveryState, WebhookDeliveriesPublic

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])
MAX_LIMIT = 500


@router.get("/deliveries", response_model=WebhookDeliveriesPublic, responses=error_responses(401, 403, 422, 503))
async def list_deliveries(
    caller: CallerDep,
    queue: WebhookQueueDep,
    team: Annotated[str | None, Query(max_length=63, description="one team's deliveries (default every team's)")] = None,
    state: Annotated[DeliveryState | None, Query(description="only deliveries in this state")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="the newest this many")] = 100,
) -> WebhookDeliveriesPublic:
    """Webhook deliveries, newest first: which event went to which endpoint, attempts, the last status and error."""
    if not caller.admin:
        raise AdminOnly("webhook deliveries")
    if queue is None:  # a store without SQL (tests' in-memory fakes) has no delivery queue
        return WebhookDeliveriesPublic(data=[], count=0, pending=0, failed=0)
    return await run_in_threadpool(queue.deliveries, team, state, limit)
