"""The OpenAPI document as clients need it: FastAPI's, with what it cannot know about this API.

- The error bodies that `errors.error_responses()` refers to, and the event payloads that
  `sse.stream_response()` does, are added to the components: the routes declare them by reference
  (a streaming route's errors stay application/json; an event's `data` is JSON in a string).
- A parameter (query, header, path) is never null in HTTP: an optional one is simply left out.
  FastAPI writes `int | None` as "integer or null", and a client generated from that sends the
  text `null`, which is refused; the null branch is dropped from every parameter's schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from .errors import ErrorPublic, ValidationErrorPublic
from .sse import STREAM_MODELS


def _add_referenced_schemas(document: dict[str, Any]) -> None:
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    models: tuple[type[BaseModel], ...] = (ErrorPublic, ValidationErrorPublic, *STREAM_MODELS)
    for model in models:
        if model.__name__ in schemas:  # a route's response model already: FastAPI wrote the same schema
            continue
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}", mode="serialization")
        for name, definition in schema.pop("$defs", {}).items():
            schemas.setdefault(name, definition)
        schemas[model.__name__] = schema


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    options = schema.get("anyOf")
    if not options:
        return schema
    kept = [option for option in options if option.get("type") != "null"]
    if len(kept) == len(options):
        return schema
    rest = {key: value for key, value in schema.items() if key not in ("anyOf", "default")}
    if schema.get("default") is not None:
        rest["default"] = schema["default"]
    return {**kept[0], **rest} if len(kept) == 1 else {**rest, "anyOf": kept}


def _drop_null_parameters(document: dict[str, Any]) -> None:
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if "schema" in parameter:
                    parameter["schema"] = _without_null(parameter["schema"])


def install_openapi_refinements(app: FastAPI) -> None:
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:  # built once, then served from FastAPI's cache
            document = build()
            _add_referenced_schemas(document)
            _drop_null_parameters(document)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
