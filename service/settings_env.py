"""Reading settings from the environment with errors an operator can act on.

pydantic-settings decodes list and dict settings as JSON before validation and, when that fails, says
only `error parsing value for field "host_paths" from source "EnvSettingsSource"`. `read_settings` turns
that, and every validation error, into one message per variable: its name (RLJOB_...), what was wrong,
and the form it takes. `PlainList` lets a list of plain names or paths be written as `a,b` as well as
JSON, since that is how operators write a path list in a ConfigMap.
"""

from __future__ import annotations

import json
import typing
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, NoDecode
from pydantic_settings.exceptions import SettingsError


class SettingsInvalid(ValueError):
    """The environment's settings cannot be used; the message names each variable and its form."""


def _plain_or_json_list(value: object) -> object:
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"starts with '[' but is not a JSON list ({e.msg} at character {e.pos})") from None
    return [item.strip() for item in text.split(",") if item.strip()]


# A list of values that contain no commas (paths, names): `["/a", "/b"]` or `/a,/b`.
# The schema mark tells the settings table of docs/settings.md (service/cli/doc_tables.py) to say so.
PlainList = Annotated[list[str], NoDecode, BeforeValidator(_plain_or_json_list), Field(json_schema_extra={"x-comma-separated": True})]


def _form(settings: type[BaseSettings], field: str) -> str:
    info = settings.model_fields.get(field)
    if info is None:
        return ""
    if any(getattr(m, "func", None) is _plain_or_json_list for m in info.metadata):
        return 'comma-separated (/data,/scratch) or a JSON list (["/data", "/scratch"])'
    origin = typing.get_origin(info.annotation)
    if origin is list:
        return 'a JSON list of strings, e.g. ["python", "-m", "trainer"]'
    if origin is dict:
        return 'a JSON object, e.g. {"team-a": ...} (see the settings table in docs/settings.md)'
    return ""


def _variable(settings: type[BaseSettings], field: str) -> str:
    return f"{settings.model_config.get('env_prefix', '')}{field.upper()}"


def _line(settings: type[BaseSettings], field: str, reason: str, value: Any = None, shown: bool = False) -> str:
    form = _form(settings, field)
    info = settings.model_fields.get(field)
    secret = info is not None and SecretStr in (info.annotation, *typing.get_args(info.annotation))
    given = f" (got {value!r})" if shown and not secret else ""
    return f"  {_variable(settings, field)}: {reason}{given}" + (f"; expected {form}" if form else "")


def read_settings[S: BaseSettings](settings: type[S], **overrides: Any) -> S:
    """`settings(**overrides)`, or SettingsInvalid naming each bad variable, the reason and the form."""
    try:
        return settings(**overrides)
    except SettingsError as e:
        field = str(e).split('"')[1] if str(e).count('"') >= 2 else ""
        cause = e.__cause__
        reason = f"not valid JSON ({cause.msg} at character {cause.pos})" if isinstance(cause, json.JSONDecodeError) else str(cause or e)
        raise SettingsInvalid("invalid settings:\n" + _line(settings, field, reason)) from None
    except ValidationError as e:
        lines = []
        for error in e.errors():
            loc = [str(part) for part in error["loc"]]
            field = loc[0] if loc else ""
            where = f" (at {'.'.join(loc[1:])})" if len(loc) > 1 else ""
            reason = str(error["msg"]).removeprefix("Value error, ") + where
            lines.append(_line(settings, field, reason, error.get("input"), shown=isinstance(error.get("input"), str | int | float)))
        raise SettingsInvalid("invalid settings:\n" + "\n".join(lines)) from None
