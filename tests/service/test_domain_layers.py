"""service/domain/ by purpose, held by a check (docs/architecture.md, "Where the domain's modules live").

The records (records/: the job record, its parts, phases, errors, ports) are the bottom: they import nothing else of
the service, so a record can be read, stored and shown without the code that decides anything about it. The
feature folders (health/, evals/, cost/, webhooks/) compute from the records and never reach up to the writer
(job_service, job_writer, observation_intake) or to the leader's rounds (rounds/), which call them. Read with `ast`
as tests/test_import_contract.py reads every import, type-only ones included.

The leader's rounds (rounds/) are given the ports and policies they read (the store, the launcher, the clock, a policy)
and call the job service only for what it does: no round reads an attribute off the service or touches a private one.

The observation intake holds the writer (job_writer.py), not the job service: it neither imports the service nor names
it, and defines no Protocol through which it could hold it unimported; the writer imports neither of them, so the
cycle cannot come back through it.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import tests.test_import_contract as contract
from service.domain.job_service import JobService

DOMAIN = "service.domain"
FEATURES = ("health", "evals", "cost", "webhooks")
ABOVE_FEATURES = (f"{DOMAIN}.job_service", f"{DOMAIN}.job_writer", f"{DOMAIN}.observation_intake", f"{DOMAIN}.rounds")
ROUNDS = "service/domain/rounds"
INTAKE = "service/domain/observation_intake.py"
WRITER = "service/domain/job_writer.py"
MAX_ROOT_MODULES = 25  # the writer and its policies; anything else has a folder


def record_violations() -> list[str]:
    return contract.violations(contract.source_files("service/domain/records"), ("service",), (f"{DOMAIN}.records",))


def feature_violations() -> list[str]:
    return contract.violations(contract.source_files(*(f"service/domain/{f}" for f in FEATURES)), ABOVE_FEATURES)


def intake_violations() -> list[str]:
    """The intake importing or naming the job service, or defining a Protocol (a host it would hold unimported); the
    writer importing the service or the intake."""
    intake = contract.ROOT / INTAKE
    found = contract.violations([intake], (f"{DOMAIN}.job_service",))
    found += contract.violations([contract.ROOT / WRITER], (f"{DOMAIN}.job_service", f"{DOMAIN}.observation_intake"))
    for node in ast.walk(ast.parse(intake.read_text(), filename=INTAKE)):
        if isinstance(node, ast.Name | ast.Attribute) and "JobService" in (getattr(node, "id", None), getattr(node, "attr", None)):
            found.append(f"{INTAKE}:{node.lineno} names JobService")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip() == "JobService":
            found.append(f"{INTAKE}:{node.lineno} names JobService in a string annotation")
        elif isinstance(node, ast.ClassDef) and any("Protocol" in ast.unparse(base) for base in node.bases):
            found.append(f"{INTAKE}:{node.lineno} defines the Protocol {node.name}")
    return found


def _names_the_job_service(node: ast.expr) -> bool:
    """`jobs` or `self.jobs`: what every round calls the job service it is given."""
    return (isinstance(node, ast.Name) and node.id == "jobs") or (isinstance(node, ast.Attribute) and node.attr == "jobs")


def rounds_violations() -> list[str]:
    """A round using anything of the job service but its public methods (a port or a policy read off it, such as
    `self.jobs.store` or `self.jobs.clock()`; a private member), or subclassing anything but a Protocol (a mixin)."""
    methods = {name for name, _ in inspect.getmembers(JobService, inspect.isfunction) if not name.startswith("_")}
    found = []
    for path in contract.source_files(ROUNDS):
        where = path.relative_to(contract.ROOT)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and _names_the_job_service(node.value) and node.attr not in methods:
                found.append(f"{where}:{node.lineno} uses {node.attr} of the job service: give the round what it reads")
            elif isinstance(node, ast.ClassDef) and any(ast.unparse(base) not in ("Protocol", "typing.Protocol") for base in node.bases):
                found.append(f"{where}:{node.lineno} {node.name} subclasses {', '.join(ast.unparse(b) for b in node.bases)}")
    return found


def test_the_records_import_nothing_of_the_service_outside_records():
    assert contract.source_files("service/domain/records")
    assert record_violations() == []


def test_the_feature_folders_import_neither_the_writer_nor_the_rounds():
    for folder in FEATURES:
        assert contract.source_files(f"service/domain/{folder}"), folder
    assert feature_violations() == []


def test_the_intake_holds_the_writer_not_the_job_service():
    assert (contract.ROOT / INTAKE).exists() and (contract.ROOT / WRITER).exists()
    assert intake_violations() == []


def test_the_rounds_are_given_their_ports_and_call_the_job_service_only_for_what_it_does():
    assert contract.source_files(ROUNDS)
    assert rounds_violations() == []


ROUND_FINE = """class Round:
    def __init__(self, jobs, store) -> None:
        self.jobs, self.store = jobs, store

    def run(self) -> None:
        for record in self.store.list_active():
            self.jobs.launch(record.id)
"""


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("self.store.list_active()", "self.jobs.store.list_active()"),
        ("self.store.list_active()", "self.jobs.clock() and []"),
        ("self.jobs.launch(record.id)", "self.jobs._launch(record.id)"),
        ("self.jobs.launch(record.id)", "jobs.launcher.launch(record.id)"),
        ("class Round:", "class Round(JobService):"),
    ],
)
def test_the_rounds_rule_catches_a_planted_reach(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: str, new: str) -> None:
    (tmp_path / ROUNDS).mkdir(parents=True)
    monkeypatch.setattr(contract, "ROOT", tmp_path)
    (tmp_path / ROUNDS / "fine.py").write_text(ROUND_FINE)
    assert rounds_violations() == []  # the fine round passes
    (tmp_path / ROUNDS / "bad.py").write_text(ROUND_FINE.replace(old, new))
    assert rounds_violations() != []


def test_the_domain_root_holds_at_most_25_modules():
    root = [p.name for p in (contract.ROOT / "service" / "domain").glob("*.py") if p.name != "__init__.py"]
    assert len(root) <= MAX_ROOT_MODULES, sorted(root)


def test_every_domain_folder_is_a_regular_package():
    # A folder without __init__.py is a namespace package: setuptools' find_packages skips it, so neither its modules
    # nor its data (cost/tpu_step_rates.json) would reach the wheel.
    domain = contract.ROOT / "service" / "domain"
    folders = [d for d in domain.iterdir() if d.is_dir() and d.name != "__pycache__"]
    assert folders
    assert [d.name for d in folders if not (d / "__init__.py").exists()] == []


@pytest.mark.parametrize(
    ("where", "line", "check"),
    [
        ("records/bad.py", "from service.domain.job_service import JobService\n", record_violations),
        ("records/bad.py", "from service.domain.cost.usage import job_usage\n", record_violations),
        ("records/bad.py", "from service.config import Settings\n", record_violations),
        ("cost/bad.py", "from service.domain.rounds.recovery import JobRecovery\n", feature_violations),
        ("health/bad.py", "from service.domain.observation_intake import ObservationIntake\n", feature_violations),
        ("webhooks/bad.py", "from service.domain import job_service\n", feature_violations),
    ],
)
def test_the_rules_catch_a_planted_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, line: str, check) -> None:
    # The rules must be able to fail: plant the import in a copy of the layout.
    for folder in ("records", *FEATURES):
        (tmp_path / "service" / "domain" / folder).mkdir(parents=True)
        (tmp_path / "service" / "domain" / folder / "fine.py").write_text("from trainer.contract import JobSpec\n")
    (tmp_path / "service" / "domain" / where).write_text(line)
    monkeypatch.setattr(contract, "ROOT", tmp_path)
    assert check() != []


INTAKE_FINE = """from .job_writer import JobWriter


class ObservationIntake:
    def __init__(self, writer: JobWriter) -> None:
        self.writer = writer
"""


@pytest.mark.parametrize(
    ("where", "text"),
    [
        (INTAKE, "from .job_service import JobService\n"),
        (INTAKE, "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from service.domain import job_service\n"),
        (INTAKE, INTAKE_FINE + "\n\ndef held(jobs: 'JobService') -> None: ...\n"),
        (INTAKE, "from typing import Protocol\n\n\nclass IntakeHost(Protocol):\n    def launch(self, job_id: str) -> None: ...\n"),
        (INTAKE, "import typing\n\n\nclass Host(typing.Protocol):\n    max_resumes: int\n"),
        (WRITER, "from .observation_intake import ObservationIntake\n"),
    ],
)
def test_the_intake_rule_catches_a_planted_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, text: str) -> None:
    for path in (INTAKE, WRITER):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(INTAKE_FINE if path == INTAKE else "import threading\n")
    monkeypatch.setattr(contract, "ROOT", tmp_path)
    assert intake_violations() == []  # the fine layout passes
    (tmp_path / where).write_text(text)
    assert intake_violations() != []
