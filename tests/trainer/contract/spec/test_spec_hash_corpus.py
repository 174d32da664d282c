"""A spec's content hash never moves (trainer/contract/spec/hashing.py): the committed corpus keeps specs and the hash
each had when it was added, and adding a field with a default to any spec model changes none of them."""

from __future__ import annotations

import copy
import functools
import json
import operator
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, Field, ValidationError, create_model

from trainer.contract.spec.async_rollout import AsyncRollout
from trainer.contract.spec.hashing import hash_rule, spec_models
from trainer.contract.spec.job import JobSpec

CORPUS = json.loads((Path(__file__).with_name("spec_hash_corpus.json")).read_text())


@pytest.mark.parametrize("entry", CORPUS, ids=[e["name"] for e in CORPUS])
def test_every_spec_in_the_corpus_keeps_its_hash(entry):
    assert JobSpec.model_validate(entry["spec"]).content_hash() == entry["content_hash"]


def _kept(then: object, now: object, where: str) -> list[str]:
    """Where `now` (a spec read today, defaults filled) no longer holds what `then` (the same spec as read when it
    joined the corpus) held: a key dropped or a value changed. Keys added since are not compared."""
    if isinstance(then, dict) and isinstance(now, dict):
        return [p for key, value in then.items() for p in (_kept(value, now[key], f"{where}.{key}") if key in now else [f"{where}.{key}"])]
    if isinstance(then, list) and isinstance(now, list) and len(then) == len(now):
        return [p for i, (a, b) in enumerate(zip(then, now, strict=True)) for p in _kept(a, b, f"{where}[{i}]")]
    return [] if then == now else [f"{where}: {then!r} -> {now!r}"]


@pytest.mark.parametrize("entry", CORPUS, ids=[e["name"] for e in CORPUS])
def test_every_spec_in_the_corpus_still_means_what_it_meant(entry):
    """A field's default never changes once added (hashing.py): a spec that left the field out is hashed without it,
    so a changed default would give the same hash another meaning. Each entry keeps the spec as read when it joined the
    corpus, every default filled in (`dump`); today's reading must still hold every value it held."""
    assert _kept(entry["dump"], JobSpec.model_validate(entry["spec"]).model_dump(mode="json"), "spec") == []


def _grown(model: type[BaseModel], target: type[BaseModel], cache: dict) -> type[BaseModel]:
    """`model` as a release that added one defaulted field to `target` would define it (its parents' fields retyped)."""
    if model in cache:
        return cache[model]
    if model is target:
        cache[model] = create_model(
            model.__name__,
            __base__=model,
            added_in_a_later_release=(int, 0),
            # the way seed and kl_direction are declared: left out of the dump while unset
            added_with_exclude_if=(int | None, Field(default=None, exclude_if=lambda v: v is None)),
        )
        return cache[model]
    retyped = {}
    for name, info in model.model_fields.items():
        kinds = typing.get_args(info.annotation) or (info.annotation,)
        new = tuple(_grown(k, target, cache) if isinstance(k, type) and issubclass(k, BaseModel) else k for k in kinds)
        if new != kinds:
            annotation = functools.reduce(operator.or_, new) if len(new) > 1 else new[0]
            retyped[name] = (annotation, copy.copy(info))
            default = info.get_default(call_default_factory=True)
            if isinstance(default, BaseModel):  # a part given by default (export) is the grown part by default
                grown = cache[type(default)]
                retyped[name][1].default_factory = lambda grown=grown, default=default: grown.model_validate(default.model_dump())
    cache[model] = create_model(model.__name__, __base__=model, **retyped) if retyped else model
    return cache[model]


@pytest.mark.parametrize("model", [m for m in spec_models(JobSpec) if m is not AsyncRollout], ids=lambda m: m.__name__)
def test_adding_a_field_with_a_default_to_any_spec_model_moves_no_hash(model, monkeypatch):
    cache: dict = {}
    grown_spec = _grown(JobSpec, model, cache)
    # In a real release the class itself grows: code comparing with its default (EvalSampling()) builds the grown one.
    monkeypatch.setattr(sys.modules[model.__module__], model.__name__, cache[model])
    grown_somewhere = 0
    for entry in CORPUS:
        spec = grown_spec.model_validate(entry["spec"])
        if "added_in_a_later_release" in json.dumps(spec.model_dump()):
            grown_somewhere += 1
            assert spec.content_hash() == entry["content_hash"], entry["name"]
    assert grown_somewhere, f"no spec in the corpus has a {model.__name__}: add one that does"


def test_each_spec_model_declares_its_first_fields_and_only_fields_it_has():
    for model in spec_models(JobSpec):
        assert model.__dict__.get("hashed_always") is not None, model.__name__
        assert model.hashed_always <= set(model.model_fields), model.__name__
    assert {hash_rule(m, name) for m in spec_models(JobSpec) for name in m.model_fields} == {"always", "when not its default"}


def test_no_valid_spec_holds_an_async_rollout_so_no_hash_has_one():
    """The one spec model the corpus cannot hold: grpo.async_rollout is refused on every accelerator today."""
    spec = next(e["spec"] for e in CORPUS if e["name"] == "examples/tiny-tpu-vm.yaml")
    asked = {**spec, "grpo": {**spec["grpo"], "async_rollout": {}}}
    with pytest.raises(ValidationError, match="async_rollout"):
        JobSpec.model_validate(asked)
