"""Client models as the plain, camelCase data the API server speaks (for JobSets, rendering and watch lists)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

from kubernetes.client import ApiClient


@functools.cache
def _api_client() -> ApiClient:
    # Only its serializer is used; a default ApiClient loads no kubeconfig and opens no connection.
    return ApiClient()


def to_plain(obj: Any) -> Any:
    """A client model (or a dict holding models) as JSON-ready data with the API's camelCase keys."""
    # The serializer ships without annotations; it returns dicts, lists and scalars.
    sanitize = cast(Callable[[object], Any], _api_client().sanitize_for_serialization)
    return sanitize(obj)
