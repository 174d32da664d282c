"""A registered spec's hash, stable when JobSpec gains a field.

A pre-registration (bench/preregistration/) records each rljob seed's spec hash: sha256 of the spec's full JSON as the
bench built it then. A field added to JobSpec since appears in today's dump at its default and would move that hash,
so the bench would refuse to run its own registered jobs and its test would fail for no change of meaning. The
service's content hash has its own rule for this (trainer/contract/spec/hashing.py); the registered hashes predate it, so
here the registration's own recorded spec says which fields it had.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import ValidationError

from trainer.contract import JobSpec


def spec_sha256(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def as_registered(spec: dict, shape: dict | None) -> dict:
    """The spec in its registered form: a field the registration's spec lacked (added to JobSpec since) is left out
    where the spec means the same without it (at its default), so a field added with a default does not move the
    registered hashes; set to anything else it stays, and the hash moves as it should."""
    if shape is None:
        return spec
    meaning = JobSpec.model_validate(spec).model_dump(mode="json")  # an invalid spec has no registered form
    out = json.loads(json.dumps(spec))

    def prune(part: dict, known: dict) -> None:
        for key in list(part):
            if key not in known:
                value = part.pop(key)
                if _meaning(out) != meaning:
                    part[key] = value
            elif isinstance(part[key], dict) and isinstance(known[key], dict):
                prune(part[key], known[key])

    prune(out, shape)
    return out


def _meaning(spec: dict) -> dict | None:
    try:
        return JobSpec.model_validate(spec).model_dump(mode="json")
    except ValidationError:  # a field the spec cannot do without: never left out
        return None
