"""JobService.list_jobs: team scoping is the service's, not the route's; paging says whether more follow."""

from __future__ import annotations

from pathlib import Path

from service.adapters.store import SqlJobStore
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPorts
from service.domain.records.models import Caller, JobFilters
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import spec_body
from trainer.contract import JobSpec

TEAM_A = Caller(team="team-a", token_id="tok_a")
TEAM_B = Caller(team="team-b", token_id="tok_b")
ADMIN = Caller(team="ops", token_id="tok_admin", admin=True)


def _names(page: list[tuple[int, object]]) -> list[str]:
    return [record.name for _, record in page]  # type: ignore[attr-defined]


def test_a_caller_sees_only_its_own_team_and_an_admin_any(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path
) -> None:
    service = JobService(JobPorts(store, fake_launcher, fake_progress))
    for caller, name in ((TEAM_A, "a-1"), (TEAM_B, "b-1"), (TEAM_A, "a-2")):
        service.submit(caller, JobSpec.model_validate(spec_body(tmp_path, name=name)))

    def names(caller: Caller, **filters: object) -> list[str]:
        page, more = service.list_jobs(caller, JobFilters(**filters), before_pk=None, limit=10)  # type: ignore[arg-type]
        assert not more
        return _names(page)

    assert names(TEAM_A) == ["a-2", "a-1"]  # no team filter: still only the caller's team
    assert names(TEAM_A, team="team-a") == ["a-2", "a-1"]
    assert names(TEAM_A, team="team-b") == []  # another team's jobs do not exist for a non-admin
    assert names(TEAM_B, name="a-1") == []
    assert names(ADMIN) == ["a-2", "b-1", "a-1"]
    assert names(ADMIN, team="team-b") == ["b-1"]


def test_pages_follow_the_cursor_and_say_when_older_jobs_follow(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path
) -> None:
    service = JobService(JobPorts(store, fake_launcher, fake_progress))
    for i in range(3):
        service.submit(TEAM_A, JobSpec.model_validate(spec_body(tmp_path, name=f"j-{i}")))
    first, more = service.list_jobs(TEAM_A, JobFilters(), before_pk=None, limit=2)
    assert _names(first) == ["j-2", "j-1"] and more
    rest, more = service.list_jobs(TEAM_A, JobFilters(), before_pk=first[-1][0], limit=2)
    assert _names(rest) == ["j-0"] and not more
