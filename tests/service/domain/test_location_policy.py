"""Team locations: every gs:// or local location of a spec must be under one of its team's prefixes.
Segment boundaries, `.`/`..` and symlink escapes, the template, the settings that configure it, and
over REST a team refused another team's prefix (422 naming the field, nothing stored)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from service.domain.location_policy import LocationPolicy, check_spec_locations, location_problem
from service.domain.records.errors import InvalidRequest
from tests.service.conftest import Api, add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, TOKEN_B, spec_body, wait_until
from trainer.contract import JobSpec

TEAM_A_GCS = ("gs://runs/team-a/",)


@pytest.mark.parametrize(
    ("uri", "under"),
    [
        ("gs://runs/team-a", True),
        ("gs://runs/team-a/job-1/ckpt", True),
        ("gs://runs/team-a2", False),  # a string prefix, not a path prefix
        ("gs://runs/team-a2/x", False),
        ("gs://runs/team", False),
        ("gs://runs", False),
        ("gs://runs-2/team-a/x", False),  # another bucket whose name starts the same
        ("gs://other/team-a/x", False),
        ("gs://runs/team-a/../team-b/x", False),  # GCS keeps '..', but path code may normalise it
        ("gs://runs/team-a/%2e%2e/team-b", False),
        ("gs://runs/team-a/./x", False),
        ("gs://runs//team-a/x", False),  # object "/team-a/x": not in the team-a/ folder
        ("/data/team-a/x", False),  # a local path is not under a gs:// prefix
    ],
)
def test_gcs_prefixes_compare_bucket_and_whole_segments(uri: str, under: bool) -> None:
    assert (location_problem(uri, TEAM_A_GCS) is None) is under


def test_a_bucket_prefix_allows_the_whole_bucket_only() -> None:
    assert location_problem("gs://team-a-bucket/any/thing", ("gs://team-a-bucket",)) is None
    assert location_problem("gs://team-a-bucket-2/x", ("gs://team-a-bucket",)) is not None


@pytest.fixture
def roots(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    team_a, team_b = tmp_path / "team-a", tmp_path / "team-b"
    (team_a / "data").mkdir(parents=True)
    (team_b / "secret").mkdir(parents=True)
    yield team_a, team_b


def test_local_paths_under_the_root_on_segment_boundaries(roots: tuple[Path, Path]) -> None:
    team_a, _ = roots
    allowed = (str(team_a),)
    assert location_problem(str(team_a / "data" / "train.jsonl"), allowed) is None
    assert location_problem(str(team_a / "runs-not-yet-created"), allowed) is None
    assert location_problem(f"file://{team_a}/data", allowed) is None
    assert location_problem(str(team_a) + "2/x", allowed) == "is outside the team's locations"
    assert location_problem("/etc/passwd", allowed) == "is outside the team's locations"


def test_dotdot_is_refused_even_when_it_would_land_inside(roots: tuple[Path, Path]) -> None:
    team_a, _ = roots
    for uri in (f"{team_a}/data/../../team-b/secret", f"{team_a}/data/../data"):
        problem = location_problem(uri, (str(team_a),))
        assert problem is not None and "'..'" in problem, uri


def test_a_symlink_out_of_the_root_is_refused(roots: tuple[Path, Path]) -> None:
    team_a, team_b = roots
    (team_a / "escape").symlink_to(team_b / "secret")
    problem = location_problem(str(team_a / "escape" / "weights"), (str(team_a),))
    assert problem is not None and f"resolves (symlinks followed) to {team_b}/secret/weights" in problem
    # A link from outside into the root is refused too: the path as written must be under a root.
    (team_b / "inward").symlink_to(team_a / "data")
    assert location_problem(str(team_b / "inward"), (str(team_a),)) is not None


def test_a_root_that_is_itself_a_symlink_holds_its_paths(roots: tuple[Path, Path], tmp_path: Path) -> None:
    team_a, _ = roots
    (tmp_path / "alias").symlink_to(team_a)
    assert location_problem(str(tmp_path / "alias" / "data"), (str(tmp_path / "alias"),)) is None


def _spec(output: str, **extra: object) -> JobSpec:
    body = {
        "name": "j",
        "model": {"source": "meta-llama/Llama-3.1-8B"},
        "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
        "output": output,
        **extra,
    }
    return JobSpec.model_validate(body)


def test_every_input_location_is_checked_and_hub_ids_are_not_locations() -> None:
    policy = LocationPolicy(default_template="gs://runs/{team}/")
    check_spec_locations(_spec("gs://runs/team-a/out"), "team-a", policy)  # model.source is a hub id
    spec = _spec(
        "gs://runs/team-a/out",
        dataset={"train_files": ["gs://runs/team-a/t.jsonl", "gs://runs/team-b/t.jsonl"], "eval_files": ["gs://runs/team-a/e.jsonl"]},
    )
    with pytest.raises(InvalidRequest) as refused:
        check_spec_locations(spec, "team-a", policy)
    assert refused.value.loc == ("body", "dataset", "train_files", 1)
    assert "gs://runs/team-a/" in str(refused.value)


def test_the_hub_repository_a_job_uploads_to_is_a_location_of_its_team() -> None:
    policy = LocationPolicy(team_prefixes={"team-a": ("gs://runs/team-a/", "hf://Team-A-Org/")}, default_template="gs://runs/{team}/")
    check_spec_locations(_spec("gs://runs/team-a/out", export={"hub_repo": "team-a-org/grpo-8b"}), "team-a", policy)
    with pytest.raises(InvalidRequest) as refused:
        check_spec_locations(_spec("gs://runs/team-a/out", export={"hub_repo": "team-b-org/grpo-8b"}), "team-a", policy)
    assert refused.value.loc == ("body", "export", "hub_repo")
    assert "export.hub_repo=team-b-org/grpo-8b is outside" in str(refused.value) and "hf://OWNER/" in str(refused.value)
    # A team on the template (gs:// only) may upload nowhere; with the policy off, anywhere.
    with pytest.raises(InvalidRequest, match="export.hub_repo=team-b-org/x"):
        check_spec_locations(_spec("gs://runs/team-b/out", export={"hub_repo": "team-b-org/x"}), "team-b", policy)
    check_spec_locations(_spec("gs://anywhere/out", export={"hub_repo": "anyone/x"}), "team-b", LocationPolicy())
    # One repository, not the owner's others.
    exact = LocationPolicy(team_prefixes={"team-a": ("gs://runs/team-a/", "hf://org/only-this")})
    check_spec_locations(_spec("gs://runs/team-a/out", export={"hub_repo": "org/only-this"}), "team-a", exact)
    with pytest.raises(InvalidRequest):
        check_spec_locations(_spec("gs://runs/team-a/out", export={"hub_repo": "org/only-this-2"}), "team-a", exact)


def test_listed_teams_use_their_list_others_the_template_and_without_either_none() -> None:
    policy = LocationPolicy(team_prefixes={"team-a": ("gs://a-bucket",)}, default_template="gs://runs/{team}/")
    assert policy.prefixes_for("team-a") == ("gs://a-bucket",)
    assert policy.prefixes_for("team-b") == ("gs://runs/team-b/",)
    assert LocationPolicy(team_prefixes={"team-a": ("gs://a-bucket",)}).prefixes_for("team-b") == ()
    with pytest.raises(InvalidRequest, match="team-b may use: none"):
        check_spec_locations(_spec("gs://a-bucket/x"), "team-b", LocationPolicy(team_prefixes={"team-a": ("gs://a-bucket",)}))
    check_spec_locations(_spec("/anywhere/at/all"), "team-b", LocationPolicy())  # not configured: today's behaviour


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("team_locations", {"Team A": ["gs://b/x"]}),
        ("team_locations", {"team-a": ["relative/dir"]}),
        ("team_locations", {"team-a": ["/data/../etc"]}),
        ("team_locations", {"team-a": ["org/model"]}),
        ("team_locations", {"team-a": ["hf://org/model/extra"]}),
        ("team_locations", {"team-a": ["hf://"]}),
        ("team_location_template", "gs://runs/shared/"),  # no {team}: every team would share it
        ("team_location_template", "gs://runs/{team}/{other}"),
        ("team_location_template", "gs://runs/{team}/../x"),
    ],
)
def test_settings_refuse_unusable_team_locations(settings_factory: Callable[..., Settings], field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        settings_factory(**{field: value})


def test_team_locations_read_from_the_environment_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLJOB_TEAM_LOCATIONS", '{"team-a": ["gs://b/team-a/", "/data/team-a"]}')
    monkeypatch.setenv("RLJOB_TEAM_LOCATION_TEMPLATE", "gs://runs/{team}/")
    policy = Settings().location_policy
    assert policy.prefixes_for("team-a") == ("gs://b/team-a/", "/data/team-a")
    assert policy.prefixes_for("team-c") == ("gs://runs/team-c/",)


@pytest.fixture
def isolated_api(
    store: SqlJobStore, fake_launcher: FakeLauncher, settings_factory: Callable[..., Settings], tmp_path: Path
) -> Iterator[Api]:
    add_test_tokens(store)
    settings = settings_factory(
        team_locations={"team-a": ["gs://runs/team-a/", str(tmp_path / "team-a")]}, team_location_template="gs://runs/{team}/"
    )
    app = create_app(settings, store=store, launcher=fake_launcher, progress=FakeProgress())
    with TestClient(app) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield Api(client, store, fake_launcher, FakeProgress())


def test_a_team_is_refused_an_output_under_another_teams_prefix(isolated_api: Api, tmp_path: Path) -> None:
    api = isolated_api
    body = spec_body(tmp_path, model={"name": "llama3.1-8b", "source": "meta-llama/Llama-3.1-8B"})
    response = api.client.post("/v1/jobs", json={**body, "output": "gs://runs/team-a/stolen"}, headers=api.as_(TOKEN_B))
    assert response.status_code == 422, response.text
    (item,) = response.json()["detail"]
    assert item["loc"] == ["body", "output"]
    assert "output=gs://runs/team-a/stolen is outside" in item["msg"] and "team-b may use: gs://runs/team-b/" in item["msg"]
    assert api.launcher.launched == []
    assert api.client.get("/v1/jobs", headers=api.as_(TOKEN_B)).json()["count"] == 0
    assert api.store.list_active() == []
    # The same spec from the team that owns the prefix, and team-b under its own template prefix, go through.
    api.submit({**body, "output": "gs://runs/team-a/mine"}, token=TOKEN_A)
    api.submit({**body, "output": "gs://runs/team-b/mine"}, token=TOKEN_B)
    assert len(api.launcher.launched) == 2


def test_a_local_input_escaping_by_symlink_is_refused_over_rest(isolated_api: Api, tmp_path: Path) -> None:
    api = isolated_api
    (tmp_path / "team-a").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "team-a" / "model")
    body = spec_body(
        tmp_path, model={"name": "llama3.1-8b", "source": str(tmp_path / "team-a" / "model")}, output=str(tmp_path / "team-a" / "runs")
    )
    response = api.client.post("/v1/jobs", json=body, headers=api.as_(TOKEN_A))
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "model", "source"]
    assert "symlinks followed" in response.json()["detail"][0]["msg"]
    assert api.launcher.launched == [] and api.store.list_active() == []
