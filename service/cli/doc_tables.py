"""The generated tables of docs/settings.md: every `RLJOB_*` service setting and `RLJOB_K8S_*` Kubernetes
setting (from the pydantic Settings classes: name, values, default, description), the CLI's exit codes and the
trainer's.

`scripts/render_docs.py` writes each table between the markers docs/settings.md holds it in (`--check` compares);
tests/test_docs_settings.py fails when the page's copy differs, so neither can drift.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from service.adapters.k8s.settings import K8sSettings
from service.config import Settings
from trainer.contract.run.exit_codes import ExitCode, describe_exit_code
from trainer.contract.spec.dns_label import DNS_LABEL_PATTERN

from .client import CLI_EXIT_MEANINGS

SETTINGS_TABLES: dict[str, type[BaseSettings]] = {"service-settings": Settings, "k8s-settings": K8sSettings}


def env_names(model: type[BaseSettings]) -> list[str]:
    prefix = model.model_config["env_prefix"]
    return [f"{prefix}{name.upper()}" for name in model.model_fields]


def _values(prop: dict[str, Any]) -> str:
    """What the variable accepts, from the field's JSON schema."""
    options = [p for p in prop.get("anyOf", [prop]) if p.get("type") != "null"]
    optional = len(options) < len(prop.get("anyOf", [prop]))
    p = options[0]
    if "enum" in p:
        text = " or ".join(f"`{v}`" for v in p["enum"])
    elif p.get("type") in ("integer", "number"):
        bounds = [
            f"≥ {p['minimum']}" if "minimum" in p else "",
            f"> {p['exclusiveMinimum']}" if "exclusiveMinimum" in p else "",
            f"≤ {p['maximum']}" if "maximum" in p else "",
        ]
        text = " ".join(["integer" if p["type"] == "integer" else "number", ", ".join(b for b in bounds if b)]).strip()
    elif p.get("type") == "boolean":
        text = "`true` or `false`"
    elif p.get("type") == "object":
        text = "JSON object"
    elif p.get("type") == "array" and p.get("x-comma-separated"):  # service/settings_env.py's PlainList
        text = f"{p['items']['type']}s, comma-separated or a JSON list"
    elif p.get("type") == "array":
        text = f"JSON list of {p['items']['type']}s"
    elif p.get("pattern") == DNS_LABEL_PATTERN:
        text = "DNS label"
    else:
        text = {"path": "path", "password": "secret"}.get(p.get("format", ""), "string")
    return f"{text} (optional)" if optional else text


def _default(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    # Factories that read this machine: shown as they read on any machine.
    if isinstance(value, Path):
        value = str(value).replace(str(Path.home()), "~", 1)
    if isinstance(value, list):
        value = json.dumps(["python" if v == sys.executable else v for v in value])
    if isinstance(value, dict):
        value = json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        value = str(value).lower()
    return f"`{value}`"


def settings_table(model: type[BaseSettings]) -> str:
    missing = [name for name, field in model.model_fields.items() if not field.description]
    if missing:
        raise ValueError(f"{model.__name__} fields without a description (docs/settings.md shows it): {', '.join(missing)}")
    props = model.model_json_schema()["properties"]
    rows = ["| variable | values | default | what it does |", "|---|---|---|---|"]
    for env, (name, field) in zip(env_names(model), model.model_fields.items(), strict=True):
        what = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{env}` | {_values(props[name])} | {_default(field)} | {what} |")
    return "\n".join(rows)


def exit_codes_table() -> str:
    rows = ["| exit code | meaning |", "|---|---|"]
    rows += [f"| {code.value} | {meaning} |" for code, meaning in CLI_EXIT_MEANINGS.items()]
    return "\n".join(rows)


def trainer_exit_codes_table() -> str:
    """The trainer's exit codes with the sentence both launchers put in a failed job's message."""
    rows = ["| exit code | name | what a failed job's message says |", "|---|---|---|"]
    rows += [f"| {code.value} | `{code.name}` | {describe_exit_code(code.value)} |" for code in ExitCode]
    return "\n".join(rows)


def generated_tables() -> dict[str, str]:
    """Marker name -> the table docs/settings.md must hold between `<!-- NAME -->` and `<!-- /NAME -->`."""
    tables = {name: settings_table(model) for name, model in SETTINGS_TABLES.items()}
    tables["cli-exit-codes"] = exit_codes_table()
    tables["trainer-exit-codes"] = trainer_exit_codes_table()
    return tables


def main() -> None:
    for name, table in generated_tables().items():
        print(f"<!-- {name} -->\n{table}\n<!-- /{name} -->\n")


if __name__ == "__main__":
    main()
