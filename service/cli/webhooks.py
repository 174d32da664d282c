"""`rljob webhooks deliveries [--team T] [--state S] [--limit N] [-o json|yaml|name]`: webhook delivery state
(GET /v1/webhooks/deliveries, admins only): which event went to which endpoint, attempts, the last status and error."""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from service.domain.webhooks.webhook_models import DeliveryState, WebhookDeliveriesPublic

from .client import handles_errors
from .output import OutputOption, api_time, console, emit

webhooks_app = typer.Typer(help="Webhook delivery state (admins).", no_args_is_help=True)


def print_deliveries(report: WebhookDeliveriesPublic) -> None:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("DELIVERY", no_wrap=True)  # ids are copied: whole
    for name in ("ENDPOINT", "EVENT", "STATE", "TRIES", "LAST"):
        table.add_column(name, overflow="fold")
    for d in report.data:
        last = "-" if d.last_status is None else str(d.last_status)
        table.add_row(d.id, f"{d.team}/{d.endpoint}", d.event, d.state.value, str(d.attempts), last)
    console.print(table)
    for d in report.data:
        if d.last_error and d.state is not DeliveryState.DELIVERED:
            console.print(f"{d.id} ({d.job_id}, {api_time(d.created_at)}): {escape(d.last_error)}", highlight=False)
    console.print(f"{report.pending} pending, {report.failed} failed")


@webhooks_app.command("deliveries")
@handles_errors
def deliveries(
    ctx: typer.Context,
    team: Annotated[str | None, typer.Option(help="one team's deliveries (default every team's)")] = None,
    state: Annotated[DeliveryState | None, typer.Option(help="only deliveries in this state")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="the newest this many")] = 100,
    output: OutputOption = None,
) -> None:
    """Webhook deliveries, newest first (an admin's token)."""
    params: dict[str, str | int] = {"limit": limit}
    if team:
        params["team"] = team
    if state is not None:
        params["state"] = state.value
    report = ctx.obj.client().webhook_deliveries(params)
    if output:
        emit(report.model_dump(mode="json"), output, [d.id for d in report.data])
        return
    print_deliveries(report)
