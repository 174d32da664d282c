"""Write the documentation pages generated from the code, or with --check name the pages that differ.

    .venv/bin/python scripts/render_docs.py           # rewrite every generated page and block
    .venv/bin/python scripts/render_docs.py --check   # change nothing; exit 1 naming each page that differs

What is generated, and from what:
- docs/settings.md: the tables between `<!-- NAME -->` and `<!-- /NAME -->` (service/cli/doc_tables.py: the
  Settings classes, `rljob`'s and the trainer's exit codes); the prose around them is written by hand.
- docs/spec.md: the whole page, from the JobSpec pydantic model (trainer.contract): every field's dotted path,
  type, default, bounds and description.
- docs/architecture.md: the phase diagram between `<!-- phase-diagram -->` markers, from the transition table in
  service/domain/phases.py.
- bench/<group>/README.md: every block rendered from bench/results/ (bench/readme_sections.py names each block's
  group; bench/learning/render_learning.py, bench/rollout/render_rollout_speed.py, bench/learning/verdict_error_rates.py).
tests/test_docs_generated.py runs the check in-process, so a page that drifts from its source fails the suite.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run by path: the repository's packages are importable as in the tests
    sys.path.insert(0, str(REPO))

from bench import readme_sections  # noqa: E402
from bench.learning import render_learning, verdict_error_rates  # noqa: E402
from bench.rollout import render_rollout_speed  # noqa: E402
from service.cli.doc_tables import generated_tables  # noqa: E402
from service.domain.records.phases import ALLOWED_TRANSITIONS, TERMINAL, JobPhase  # noqa: E402
from trainer.contract import JobSpec  # noqa: E402
from trainer.contract.spec.hashing import hash_rule  # noqa: E402

SETTINGS_PAGE = REPO / "docs" / "settings.md"
SPEC_PAGE = REPO / "docs" / "spec.md"
ARCHITECTURE_PAGE = REPO / "docs" / "architecture.md"
REGENERATE = ".venv/bin/python scripts/render_docs.py"


def replace_marked(text: str, blocks: dict[str, str], page: str) -> str:
    """`text` with each `<!-- NAME -->` ... `<!-- /NAME -->` block holding blocks[NAME]; a missing marker is an error."""
    for name, body in blocks.items():
        found = re.search(rf"<!-- {re.escape(name)} -->\n(.*?)<!-- /{re.escape(name)} -->", text, re.DOTALL)
        if not found:
            raise ValueError(f"{page} has no <!-- {name} --> ... <!-- /{name} --> block")
        text = text[: found.start(1)] + body + "\n" + text[found.end(1) :]
    return text


# --- docs/spec.md -------------------------------------------------------------------------------------------


def _schema_type(prop: dict[str, Any], defs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A field's type in words and the schema that carries its bounds (the non-null branch of an optional)."""
    options = [p for p in prop.get("anyOf", [prop]) if p.get("type") != "null"]
    optional = len(options) < len(prop.get("anyOf", [prop]))
    p = options[0]
    if "$ref" in p:
        text = f"`{p['$ref'].rsplit('/', 1)[-1]}` (below)"
    elif "enum" in p:
        text = "one of " + ", ".join(f"`{v}`" for v in p["enum"])
    elif p.get("type") == "array":
        text = f"list of {p['items'].get('type', 'values')}s"
    elif p.get("type") == "object":
        text = f"map of string to {p.get('additionalProperties', {}).get('type', 'value')}"
    else:
        text = p.get("type", "value")
    return (f"{text} or null" if optional else text), p


def _bounds(p: dict[str, Any]) -> str:
    found = []
    words = {"minimum": "≥", "exclusiveMinimum": ">", "maximum": "≤", "exclusiveMaximum": "<"}
    found += [f"{sign} {p[key]}" for key, sign in words.items() if key in p]
    found += [f"length {p['minLength']}-{p['maxLength']}" if "minLength" in p else f"length ≤ {p['maxLength']}"] if "maxLength" in p else []
    found += [f"at most {p['maxItems']} items"] if "maxItems" in p else []
    found += [f"at most {p['maxProperties']} entries"] if "maxProperties" in p else []
    found += [f"pattern `{p['pattern']}`"] if "pattern" in p else []
    if "propertyNames" in p:
        found.append(f"keys: pattern `{p['propertyNames']['pattern']}`")
    if "pattern" in p.get("additionalProperties", {}):
        found.append(f"values: pattern `{p['additionalProperties']['pattern']}`")
    return ", ".join(found).replace("|", "\\|") or "-"


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "its fields' defaults"
    return f"`{json.dumps(value)}`"


def spec_page(spec_model: type[BaseModel] = JobSpec) -> str:
    """docs/spec.md: one table per model of the job spec, each field with its dotted path."""
    schema = spec_model.model_json_schema()
    defs: dict[str, Any] = schema.get("$defs", {})
    lines = [
        "# The job spec",
        "",
        "<!-- Generated from trainer.contract.JobSpec by scripts/render_docs.py; edit the model, then rerun it. -->",
        "",
        "What `rljob submit SPEC` and `python -m trainer run --spec SPEC` accept (YAML or JSON; `${VAR}` expands from the",
        "environment). A spec that breaks a rule is refused at submit with 422 naming the field, and by the trainer with",
        "exit 65. Why strings are this strict, and where each upper bound comes from: `trainer/contract/spec/values.py`.",
        "Checks that span fields (e.g. `max_target_length` above `max_prefill_predict_length`, the slice's chips per VM)",
        "are the models' validators in `trainer/contract/spec/job.py`.",
        "",
        'The column "hashed" says how a field enters the spec\'s content hash, which keys idempotency: `always` for the',
        "fields a part had when it first entered the hash, `when not its default` for every field added since, so a spec",
        "written before a field existed keeps its hash (`trainer/contract/spec/hashing.py`; the committed corpus of",
        "`tests/trainer/contract/spec/test_spec_hash_corpus.py` fails if one moves). A default never changes once its",
        "field is added: a spec that left the field out would mean something else under the same hash, and the corpus,",
        "which keeps each spec as read when it joined, every default filled in, fails if one does.",
        "",
    ]
    missing: list[str] = []
    for path, model in _model_paths(spec_model):
        name = model.__name__
        node = schema if model is spec_model else defs[name]
        lines += [f"## `{path or 'spec'}`: {name}", ""]
        if model.__doc__ and not model.__doc__.startswith(f"{name}("):
            lines += [" ".join(model.__doc__.split()), ""]
        lines += ["| field | type | default | bounds | hashed | what it is |", "|---|---|---|---|---|---|"]
        for field_name, prop in node["properties"].items():
            field = model.model_fields[field_name]
            dotted = f"{path}.{field_name}" if path else field_name
            what = prop.get("description") or field.description
            if not what:
                missing.append(dotted)
            kind, bounded = _schema_type(prop, defs)
            hashed = hash_rule(model, field_name)
            row = [f"`{dotted}`", kind, _default(field), _bounds(bounded), hashed, (what or "").replace("|", "\\|")]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    if missing:
        raise ValueError(f"JobSpec fields without a description (docs/spec.md shows it): {', '.join(missing)}")
    return "\n".join(lines).rstrip("\n") + "\n"


def _model_paths(model: type[BaseModel], path: str = "") -> list[tuple[str, type[BaseModel]]]:
    """(dotted path, model) of the spec and every model nested in it (an optional one too), depth first."""
    out = [(path, model)]
    for name, field in model.model_fields.items():
        for arg in [field.annotation, *getattr(field.annotation, "__args__", ())]:
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                out += _model_paths(arg, f"{path}.{name}" if path else name)
    return out


# --- docs/architecture.md -----------------------------------------------------------------------------------


def phase_diagram() -> str:
    """The transition table of service/domain/phases.py as a mermaid state diagram."""
    lines = ["```mermaid", "stateDiagram-v2", f"    [*] --> {JobPhase.QUEUED.value}"]
    for phase in JobPhase:
        lines += [f"    {phase.value} --> {target.value}" for target in JobPhase if target in ALLOWED_TRANSITIONS[phase]]
    lines += [f"    {phase.value} --> [*]" for phase in JobPhase if phase in TERMINAL]
    return "\n".join([*lines, "```"])


# --- bench/<group>/README.md --------------------------------------------------------------------------------


def _between(text: str, begin: str, end: str, body: str, page: str) -> str:
    if begin not in text or end not in text:
        raise ValueError(f"{page} has no {begin} ... {end} block")
    start, stop = text.index(begin) + len(begin), text.index(end)
    return text[:start] + "\n" + body + "\n" + text[stop:]


def bench_page(group: str) -> Callable[[str], str]:
    """What bench/<group>/README.md should hold: each of its blocks rendered from bench/results/."""

    def render(text: str) -> str:
        for name in readme_sections.sections_of(group):
            text = readme_sections.replace(text, name, readme_sections.rendered(name))
        if group == "learning":
            learning = json.loads(render_learning.RESULT_FILE.read_text())
            text = render_learning.replace_section(text, render_learning.render_section(learning, render_learning.followup_files()))
            verdicts = verdict_error_rates.render(json.loads(verdict_error_rates.RESULT_FILE.read_text())).rstrip("\n")
            text = _between(text, verdict_error_rates.BEGIN, verdict_error_rates.END, verdicts, "bench/learning/README.md")
        if group == "rollout":
            speed = json.loads(render_rollout_speed.RESULT_FILE.read_text())
            text = render_rollout_speed.replace_section(text, render_rollout_speed.render_section(speed))
        return text

    return render


# --- all pages ----------------------------------------------------------------------------------------------

# page -> what it should hold, given what it holds now
PAGES: dict[Path, Callable[[str], str]] = {
    SETTINGS_PAGE: lambda text: replace_marked(text, generated_tables(), "docs/settings.md"),
    SPEC_PAGE: lambda _text: spec_page(),
    ARCHITECTURE_PAGE: lambda text: replace_marked(text, {"phase-diagram": phase_diagram()}, "docs/architecture.md"),
    **{page: bench_page(group) for group, page in readme_sections.PAGES.items()},
}


def pages_that_differ() -> list[str]:
    """The generated pages whose text on disk is not what their sources give (repository-relative)."""
    return [
        str(page.relative_to(REPO)) for page, render in PAGES.items() if not page.exists() or render(page.read_text()) != page.read_text()
    ]


def write_pages() -> list[str]:
    changed = []
    for page, render in PAGES.items():
        current = page.read_text() if page.exists() else ""
        wanted = render(current)
        if wanted != current:
            page.write_text(wanted)
            changed.append(str(page.relative_to(REPO)))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 naming the pages that differ")
    args = parser.parse_args(argv)
    if args.check:
        stale = pages_that_differ()
        for page in stale:
            print(f"{page} differs from what its sources give; run `{REGENERATE}`", file=sys.stderr)
        return 1 if stale else 0
    changed = write_pages()
    print(f"rendered {len(PAGES)} page(s); changed: {', '.join(changed) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
