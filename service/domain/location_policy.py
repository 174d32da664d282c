"""Where a team's jobs may read and write: at submit, every location of a spec (its `output` and each of
`JobSpec.input_locations()`; Hugging Face Hub ids are not locations) must lie under one of the team's
allowed prefixes, gs:// prefixes or local directory roots. Anything else is a 422 naming the field and
the prefixes, and nothing is stored.

The policy is off until a deployment configures it (RLJOB_TEAM_LOCATIONS or
RLJOB_TEAM_LOCATION_TEMPLATE); once on, a team with no prefixes may use no location at all.

Hugging Face Hub ids a job reads (model.source, dataset.name) are public sources, not locations; the
repository a job *writes* (`export.hub_repo`) is one: it must lie under a `hf://OWNER/` or
`hf://OWNER/NAME` entry of the team's prefixes, compared case-insensitively as the Hub resolves ids.

Containment is decided on path segments, never on string prefixes, so gs://b/team-a2 is not under
gs://b/team-a. Empty, `.` and `..` segments are refused outright: GCS keeps them literally, but path code in
the trainer's libraries may normalise them into another team's prefix. A local path must be under a root
both as written and with its symlinks resolved (a link inside a root pointing out of it is refused).
Local checks are made on the service's machine at submit: a link changed after that is not seen, so
local roots isolate only as far as file permissions back them (docs/deploy-gke.md, per-team isolation).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal
from urllib.parse import unquote

from service.domain.records.errors import InvalidRequest
from trainer.contract import JobSpec, local_path, location_kind
from trainer.contract.spec.dns_label import is_dns_label

TEAM_PLACEHOLDER = "{team}"
HUB_SCHEME = "hf://"  # a team's Hub destinations in its prefixes: hf://OWNER/ or hf://OWNER/NAME
ResolvePath = Callable[[str], str]


@dataclass(frozen=True)
class Place:
    """A location split into what containment compares: gcs (bucket, *segments) or local path parts."""

    kind: Literal["gcs", "local", "hub"]
    parts: tuple[str, ...]

    def is_under(self, root: Place) -> bool:
        return self.kind == root.kind and self.parts[: len(root.parts)] == root.parts


def parse_place(uri: str) -> Place:
    """Split a gs:// URI, an absolute local path or an hf://OWNER[/NAME] destination; ValueError for
    anything else or a `.`/`..` segment."""
    if uri.startswith(HUB_SCHEME):
        segments = uri.removeprefix(HUB_SCHEME).rstrip("/").split("/")
        if "" in segments or len(segments) > 2:
            raise ValueError(f"{uri!r} is not hf://OWNER/ or hf://OWNER/NAME")
        return Place("hub", tuple(s.lower() for s in segments))
    kind = location_kind(uri)
    if kind == "gcs":
        segments = uri.removeprefix("gs://").rstrip("/").split("/")  # gs://b/x/ and gs://b/x are one place
        # GCS keeps an empty segment: gs://b//team-a/x is object "/team-a/x", outside the prefix team-a/.
        if "" in segments:
            raise ValueError(f"{uri!r} has an empty segment ('//') or no bucket")
        parts = tuple(segments)
    elif kind == "local":
        path = PurePosixPath(local_path(uri))
        if not path.is_absolute():
            raise ValueError(f"{uri!r} is not an absolute path")
        parts = path.parts[1:]
    else:
        raise ValueError(f"{uri!r} is neither a gs:// URI nor an absolute local path")
    if any(unquote(s) in (".", "..") for s in parts):
        raise ValueError(f"{uri!r} has a '.' or '..' segment")
    return Place(kind, parts)


@dataclass(frozen=True)
class LocationPolicy:
    """Each team's allowed prefixes; a team not listed gets `default_template` with its name filled in."""

    team_prefixes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    default_template: str = ""  # e.g. gs://rljob-runs/{team}/

    @property
    def enforced(self) -> bool:
        return bool(self.team_prefixes) or bool(self.default_template)

    def prefixes_for(self, team: str) -> tuple[str, ...]:
        if team in self.team_prefixes:
            return self.team_prefixes[team]
        # Teams are DNS labels (tokens.py); the guard keeps a name with '/' or '..' from widening a template.
        if self.default_template and is_dns_label(team):
            return (self.default_template.replace(TEAM_PLACEHOLDER, team),)
        return ()


UNRESTRICTED = LocationPolicy()


def spec_locations(spec: JobSpec) -> list[tuple[str, str]]:
    """(field path, URI) of every location the job reads or writes: gs:// and local ones, and the Hub
    repository it uploads to (as hf://OWNER/NAME)."""
    candidates = [("output", spec.output), *spec.input_locations()]
    found = [(name, uri) for name, uri in candidates if location_kind(uri) != "hub"]
    if spec.export.hub_repo:
        found.append(("export.hub_repo", f"{HUB_SCHEME}{spec.export.hub_repo}"))
    return found


def _local_problem(uri: str, roots: list[str], resolve: ResolvePath) -> str | None:
    # As written against the roots as written, and resolved against the roots resolved: a root that is
    # itself a symlink (/tmp on macOS) still holds its own paths.
    if not any(parse_place(uri).is_under(parse_place(r)) for r in roots):
        return "is outside the team's locations"
    resolved = parse_place(resolve(local_path(uri)))
    if not any(resolved.is_under(parse_place(resolve(local_path(r)))) for r in roots):
        return f"resolves (symlinks followed) to /{'/'.join(resolved.parts)}, outside the team's locations"
    return None


def location_problem(uri: str, prefixes: tuple[str, ...], resolve: ResolvePath = os.path.realpath) -> str | None:
    """Why `uri` is not under one of `prefixes` (None: it is)."""
    try:
        place = parse_place(uri)
    except ValueError as e:
        return f"is refused: {e}"
    same_kind = [p for p in prefixes if parse_place(p).kind == place.kind]
    if place.kind == "local":
        return _local_problem(uri, same_kind, resolve)
    return None if any(place.is_under(parse_place(p)) for p in same_kind) else "is outside the team's locations"


def _loc(field_path: str) -> tuple[str | int, ...]:
    return ("body", *(int(p) if p.isdigit() else p for p in field_path.split(".")))


def check_spec_locations(spec: JobSpec, team: str, policy: LocationPolicy, resolve: ResolvePath = os.path.realpath) -> None:
    """Raise InvalidRequest for the first location of `spec` outside `team`'s prefixes."""
    if not policy.enforced:
        return
    prefixes = policy.prefixes_for(team)
    for field_path, uri in spec_locations(spec):
        problem = location_problem(uri, prefixes, resolve)
        if problem is None:
            continue
        allowed = ", ".join(prefixes) if prefixes else "none (an admin sets them with RLJOB_TEAM_LOCATIONS)"
        shown = uri.removeprefix(HUB_SCHEME) if field_path == "export.hub_repo" else uri
        hint = " (Hub destinations are listed as hf://OWNER/ in RLJOB_TEAM_LOCATIONS)" if field_path == "export.hub_repo" else ""
        raise InvalidRequest(_loc(field_path), f"{field_path}={shown} {problem}; team {team} may use: {allowed}{hint}")
