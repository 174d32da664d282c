"""Serves the team dashboard's built assets from the control service, so the embedded default and
the cluster deployment need nothing else to deploy.

The assets are built from dashboard/ by scripts/build-dashboard.sh (npm ci + esbuild) into
`static/`, which ships as package data. The assets hold no data: every job the page shows comes
from the /v1 API with the viewer's bearer token, so they are served without auth.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
DASHBOARD_PATH = "/ui"

# Only our own origin: no CDN can be used by accident, and an injected <script> from a job name
# could not load anything even if escaping ever failed. No inline script or style either.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

_NOT_BUILT = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>rljob dashboard</title></head>
<body><main><h1>The dashboard is not built</h1>
<p>Run <code>scripts/build-dashboard.sh</code> (needs Node and npm; <code>scripts/bootstrap.sh</code> runs it)
and restart the service. The REST API under <code>/v1</code> works without it.</p></main></body></html>"""


class DashboardFiles(StaticFiles):
    """StaticFiles with security headers and a cache policy that suits hashed asset names."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        if path.startswith("assets/") and response.status_code == 200:
            # Names carry a content hash (dashboard/build.mjs), so they never change meaning.
            response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        else:
            # index.html names the current bundle; a cached copy would pin an old build.
            response.headers["Cache-Control"] = "no-cache"
        return response


def _has_root_route(app: FastAPI) -> bool:
    return any(getattr(route, "path", None) in ("/", "") for route in app.router.routes)


def mount_dashboard(app: FastAPI, *, static_dir: Path = STATIC_DIR, path: str = DASHBOARD_PATH) -> None:
    """Serve the dashboard at `path` (default /ui/) and send `/` there unless the app owns `/`.

    Without built assets the service still starts and `path` explains how to build them, because a
    missing UI must not take the job API down with it. Calling it twice is harmless.
    """
    if any(getattr(route, "name", None) == "dashboard" for route in app.router.routes):
        return
    if not (static_dir / "index.html").is_file():
        log.warning("dashboard assets missing in %s; run scripts/build-dashboard.sh", static_dir)

        async def dashboard_not_built() -> HTMLResponse:
            return HTMLResponse(_NOT_BUILT, status_code=503)

        app.add_api_route(path, dashboard_not_built, include_in_schema=False, name="dashboard")
        app.add_api_route(f"{path}/", dashboard_not_built, include_in_schema=False)
    else:
        app.mount(path, DashboardFiles(directory=static_dir, html=True), name="dashboard")

    if not _has_root_route(app):

        async def to_dashboard() -> RedirectResponse:
            return RedirectResponse(f"{path}/", status_code=307)

        app.add_api_route("/", to_dashboard, include_in_schema=False)
