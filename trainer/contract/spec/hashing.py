"""How a job spec enters its content hash, declared once on each spec model.

The content hash keys idempotency (a client retrying a submit with its Idempotency-Key) and the run's repro record,
so a spec must keep its hash across upgrades. Each spec model names, in `hashed_always`, the fields it had when it
first entered the hash (version 1 of the rule): those are always hashed. Every other field, added since, enters the
hash only when set to other than its default. A spec written before a field existed therefore keeps its hash, and
adding a field with a default needs no step here. A default must never change once a field is added: the old specs
that left it out would then mean something else under the same hash.

tests/trainer/contract/spec/test_spec_hash_corpus.py keeps specs and the hashes earlier versions gave them, and fails if one
moves; docs/spec.md's column "hashed" is rendered from these declarations (`hash_rule`).
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel

HASH_RULE_VERSION = 1


def hash_body(model: BaseModel) -> dict[str, Any]:
    """The model's JSON as it is hashed: the fields later than a model's first version left out at their defaults."""
    body: dict[str, Any] = model.model_dump(mode="json")
    _prune(model, body)
    return body


def _prune(model: BaseModel, body: dict[str, Any]) -> None:
    always = _hashed_always(type(model))
    for name, info in type(model).model_fields.items():
        if name not in body:  # left out of the dump already (a field's exclude_if)
            continue
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            _prune(value, body[name])
        elif isinstance(value, (list, tuple)):
            for item, dumped in zip(value, body[name], strict=True):
                if isinstance(item, BaseModel):
                    _prune(item, dumped)
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, BaseModel):
                    _prune(item, body[name][key])
        if name not in always and value == info.get_default(call_default_factory=True):
            del body[name]


def _hashed_always(model: type[BaseModel]) -> frozenset[str]:
    always = getattr(model, "hashed_always", None)
    if always is None:  # a spec model must say it: guessing would move hashes the day a field is added
        raise TypeError(f"{model.__name__} declares no hashed_always (trainer/contract/spec/hashing.py)")
    return frozenset(always)


def spec_models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """Every model reachable from `root` through its fields, `root` first."""
    found: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in found:
            return
        found.append(model)
        for info in model.model_fields.values():
            for kind in (info.annotation, *typing.get_args(info.annotation)):
                if isinstance(kind, type) and issubclass(kind, BaseModel):
                    visit(kind)

    visit(root)
    return found


def hash_rule(model: type[BaseModel], name: str) -> str:
    """How field `name` of `model` enters the content hash, in the words docs/spec.md's table uses."""
    if name in _hashed_always(model):
        return "always"
    return "when not its default"
