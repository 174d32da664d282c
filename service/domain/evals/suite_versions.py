"""Suite versions: the service numbers each new content of a suite, so results name "arith-b v2 (hash ...)".

The trainer hashes exactly what an eval job loaded (SuiteIdentity.content_hash: rows, reward file, template,
sampling). The n-th distinct hash of a suite name within its scope is version n, in order of first appearance,
kept in the store (suite_versions table) so numbers survive restarts and are the same on every replica. The scope
is "builtin" for the built-in suites, which every team shares (a new version appears when a trainer release
changes one), and the team for a user suite: two teams' suites of one name are different suites.

A version is assigned when an eval job's report is folded (JobService._fold, in the fold's own transaction) and
kept on the job's report (RunReport.suite_version), so reading a result never touches the table. The suite a
report names must be the one the spec asked for: a report naming another suite, or claiming a user suite is
built in, gets no version (the job's trainer wrote it; it must not add versions to the built-in sequence).
"""

from __future__ import annotations

import logging
from datetime import datetime

from service.domain.records.eval_models import EvalSuitePublic, SuiteKey
from service.domain.records.models import JobRecord
from service.domain.records.ports import JobTx
from trainer.contract import JobSpec
from trainer.contract.run.eval_report import EvalReport

log = logging.getLogger(__name__)

BUILTIN_SCOPE = "builtin"


def suite_scope(spec: JobSpec, team: str) -> str:
    """Where an eval job's suite is numbered: the shared built-in sequence, or its team's own."""
    if spec.evaluation is None:
        raise ValueError("not an eval job")
    return BUILTIN_SCOPE if spec.evaluation.suite.builtin else team


def suite_key(record: JobRecord, report: EvalReport) -> SuiteKey | None:
    """The key the report's suite is numbered under, or None when the report is not about the spec's suite."""
    task = record.spec.evaluation
    if task is None:
        return None
    reported = report.suite
    if reported.name != task.suite.name or reported.builtin != task.suite.builtin:
        log.warning(
            "job %s: its eval report names suite %r (built in: %s), not the spec's %r; no version is assigned",
            record.id,
            reported.name[:63],
            reported.builtin,
            task.suite.name,
        )
        return None
    return SuiteKey(suite_scope(record.spec, record.team), reported.name, reported.content_hash)


def assign_suite_version(record: JobRecord, tx: JobTx, now: datetime, *, folded_before: EvalReport | None) -> None:
    """Give the job's eval report its suite version, in the fold's transaction, when the fold brought a new report
    (`folded_before`: the report the record held before this fold)."""
    report = record.report.eval_report
    if report is None or (report is folded_before and record.report.suite_version is not None):
        return
    key = suite_key(record, report)
    record.report.suite_version = None if key is None else tx.suite_version(key, job_id=record.id, now=now)


def suite_public(record: JobRecord) -> EvalSuitePublic:
    task = record.spec.evaluation
    if task is None:
        raise ValueError(f"{record.id} is not an eval job")
    report = record.report.eval_report
    if report is None:
        functions = [] if task.suite.builtin else list(task.suite.rewards)
        return EvalSuitePublic(
            name=task.suite.name,
            scope=suite_scope(record.spec, record.team),
            version=None,
            content_hash=None,
            rows=None,
            reward_functions=functions,
            sampling=task.suite.sampling,
        )
    return EvalSuitePublic(
        name=task.suite.name,
        scope=suite_scope(record.spec, record.team),
        version=record.report.suite_version,
        content_hash=report.suite.content_hash,
        rows=report.suite.rows,
        reward_functions=list(report.suite.reward_functions),
        sampling=report.suite.sampling,
    )
