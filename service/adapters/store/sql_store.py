"""The JobStore on SQLAlchemy 2: SQLite (WAL, the embedded default) or PostgreSQL (production)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import Table, create_engine, event, exists, func, insert, select, text, update
from sqlalchemy.engine import Connection, CursorResult, Engine, Row, make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from service.domain.records.errors import IdempotencyKeyTaken, StoreUnavailable
from service.domain.records.eval_models import SuiteKey, SuiteVersion
from service.domain.records.models import (
    JobEvent,
    JobFilters,
    JobRecord,
    MetricPoint,
    TokenRecord,
)
from service.domain.records.phases import TERMINAL, JobPhase

from .admission_locks import lock_team_admissions
from .leader_terms import require_term, take_term
from .lock_wait import BUSY_TIMEOUT_MS, lock_wait, waited_out
from .record_rows import apply_record, to_record
from .shared_records import SharedRecords
from .suite_version_rows import suite_version, suite_versions
from .tables import JobEventRow, JobLabelRow, JobRow, MetricPointRow, TokenRow
from .writability import write_problem

log = logging.getLogger(__name__)
T = TypeVar("T")

# One connection per worker thread of anyio's default limiter (the thread pool sync routes run on), so
# a busy read path never opens and closes connections per checkout; the overflow serves the
# supervisor's and the launcher's own threads.
POOL_SIZE = 40
POOL_OVERFLOW = 10
# PostgreSQL: connections are replaced after this instead of pinged before every checkout (a round
# trip per request); a connection that died anyway fails one read, which is retried once.
POOL_RECYCLE_S = 300


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # readers (SSE streams) never block the writer
    cur.execute("PRAGMA synchronous=NORMAL")  # durable at checkpoints; WAL keeps it consistent
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def build_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        if parsed.database and parsed.database != ":memory:":
            pool: dict[str, Any] = {"pool_size": POOL_SIZE, "max_overflow": POOL_OVERFLOW}
        else:  # in memory: SQLAlchemy keeps one connection per thread, a pool size does not apply
            pool = {}
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000}, **pool)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return create_engine(url, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW, pool_recycle=POOL_RECYCLE_S)


# Reads use the tables, not the mapped classes: an ORM attribute in a statement brings the ORM's
# compile step along even when only columns are selected.
_JOBS, _LABELS, _TOKENS = JobRow.__table__, JobLabelRow.__table__, TokenRow.__table__
_EVENTS, _METRICS = cast(Table, JobEventRow.__table__), cast(Table, MetricPointRow.__table__)  # declared: Table


def _labels_by_pk(conn: Connection | Session, pks: Sequence[int]) -> dict[int, dict[str, str]]:
    """The labels of all these jobs in one query (a page of 50 jobs is 2 queries, not 51)."""
    labels: dict[int, dict[str, str]] = {pk: {} for pk in pks}
    if pks:
        stmt = select(_LABELS.c.job_pk, _LABELS.c.key, _LABELS.c.value).where(_LABELS.c.job_pk.in_(pks))
        for job_pk, key, value in conn.execute(stmt):
            labels[job_pk][key] = value
    return labels


# PostgreSQL: taken (for the rest of the transaction) before a transaction's first event insert.
# Streams read the event log by seq and must never see seq n+1 before seq n commits; a sequence hands
# out numbers at insert, not at commit, so with several replicas writing, the lock makes seq order
# commit order. SQLite: its single write lock already does.
EVENT_ORDER_LOCK_KEY = int.from_bytes(b"rljob-ev", "big") & 0x7FFF_FFFF_FFFF_FFFF


class _Tx:
    def __init__(self, session: Session, for_update_supported: bool, *, order_events: bool = False, dialect: str = "") -> None:
        self.session = session
        self._dialect = dialect
        self._for_update = for_update_supported
        self._order_events = order_events  # not yet holding the event-order lock; see EVENT_ORDER_LOCK_KEY
        self._rows: dict[str, JobRow] = {}

    def _row(self, job_id: str, *, for_update: bool = False) -> JobRow | None:
        stmt = select(JobRow).where(JobRow.id == job_id)
        if for_update and self._for_update:
            stmt = stmt.with_for_update()
        row = self.session.scalars(stmt).one_or_none()
        if row is not None:
            self._rows[job_id] = row
        return row

    def _labels(self, pk: int) -> dict[str, str]:
        rows = self.session.scalars(select(JobLabelRow).where(JobLabelRow.job_pk == pk)).all()
        return {r.key: r.value for r in rows}

    def get(self, job_id: str, *, for_update: bool = False) -> JobRecord | None:
        row = self._row(job_id, for_update=for_update)
        return None if row is None else to_record(row, self._labels(row.pk))

    def find_by_idempotency_key(self, team: str, key: str) -> JobRecord | None:
        stmt = select(JobRow).where(JobRow.team == team, JobRow.idempotency_key == key)
        row = self.session.scalars(stmt).one_or_none()
        return None if row is None else to_record(row, self._labels(row.pk))

    def insert(self, record: JobRecord) -> None:
        row = JobRow()
        apply_record(row, record)
        self.session.add(row)
        try:
            self.session.flush()
        except IntegrityError as e:
            if record.idempotency_key is not None and "idempotency_key" in str(e.orig):
                raise IdempotencyKeyTaken(record.idempotency_key) from e
            raise
        for key, value in record.labels.items():
            self.session.add(JobLabelRow(job_pk=row.pk, key=key, value=value))
        self._rows[record.id] = row

    def update(self, record: JobRecord) -> None:
        row = self._rows.get(record.id) or self._row(record.id)
        if row is None:
            raise KeyError(record.id)
        apply_record(row, record)

    def append_event(self, record: JobRecord, kind: str, data: dict[str, Any], time: datetime) -> int:
        self._hold_event_order()
        row = JobEventRow(job_id=record.id, team=record.team, kind=kind, time=time, data=data)
        self.session.add(row)
        self.session.flush()
        record.last_event_seq = row.seq
        return row.seq

    def append_events(self, record: JobRecord, entries: Sequence[tuple[str, dict[str, Any]]], time: datetime) -> None:
        # One INSERT ... RETURNING for the lot: a flush per entry cost about 1 ms of the write lock, and a
        # trainer's batch of 20,000 events (one read of its events file) took 12 s of them.
        if not entries:
            return
        self._hold_event_order()
        rows = [{"job_id": record.id, "team": record.team, "kind": kind, "time": time, "data": data} for kind, data in entries]
        inserted = self.session.execute(insert(_EVENTS).returning(_EVENTS.c.seq, sort_by_parameter_order=True), rows)
        record.last_event_seq = inserted.scalars().all()[-1]

    def _hold_event_order(self) -> None:
        if self._order_events:
            self.session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": EVENT_ORDER_LOCK_KEY})
            self._order_events = False

    def lock_team_admissions(self, team: str) -> None:
        lock_team_admissions(self.session, self._dialect, team)

    def require_term(self, term: int | None) -> None:
        require_term(self.session, term, lock_row=self._for_update)

    def suite_version(self, key: SuiteKey, *, job_id: str, now: datetime) -> int:
        return suite_version(self.session, key, job_id=job_id, now=now)

    def add_metric_points(self, job_id: str, points: Sequence[MetricPoint]) -> None:
        if points:  # one INSERT for the lot, as append_events
            rows = [{"job_id": job_id, "kind": p.kind, "step": p.step, "time": p.time, "values": p.values} for p in points]
            self.session.execute(insert(_METRICS), rows)


_IDS_PER_STATEMENT = 500  # SQLite's default limit is 32766 bound parameters (999 before 3.32)


class SqlJobStore:
    def __init__(self, url: str, *, engine: Engine | None = None, shared_reads: int = 0) -> None:
        """`shared_reads`: keep up to this many job records in memory for `shared_record` (0: none).
        Only for a database no other process writes jobs to (shared_records.py says why)."""
        self.url = url
        self.engine = engine or build_engine(url)
        self.dialect = self.engine.dialect.name
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._shared = SharedRecords(shared_reads) if shared_reads else None

    def migrate(self) -> None:
        from .migrate import upgrade_to_head

        upgrade_to_head(self.engine)

    def ping(self) -> None:
        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except SQLAlchemyError as e:
            raise StoreUnavailable(f"database {self.engine.url.render_as_string()} is unreachable: {e}") from e

    def check_writable(self) -> None:
        """StoreUnavailable saying why, when a write could not be made now (writability.py)."""
        problem = write_problem(self.engine)
        if problem is not None:
            raise StoreUnavailable(problem)

    @contextmanager
    def transaction(self, *, wait_s: float | None = None) -> Iterator[_Tx]:
        tx: _Tx | None = None
        try:
            with self._sessions() as session, session.begin():
                tx = _Tx(
                    session, for_update_supported=self.dialect != "sqlite", order_events=self.dialect == "postgresql", dialect=self.dialect
                )
                with lock_wait(session, self.dialect, wait_s):
                    yield tx
                    session.flush()  # every write within the wait: the commit after it waits for no lock (WAL)
        except OperationalError as e:  # locked, read-only, out of space: the store's fault, not the request's
            if wait_s is not None and waited_out(e):
                reason = str(e.orig).splitlines()[0]  # PostgreSQL's goes on with the statement
                raise StoreUnavailable(
                    f"the database's write lock was not free within {round(wait_s, 1):g} s ({reason}): another writer holds "
                    "it; nothing was stored; retry in a moment"
                ) from e
            raise StoreUnavailable(f"the database could not store this: {e.orig}; retry later") from e
        finally:  # after the commit: a shared read from before it can no longer land (shared_records.py)
            if self._shared is not None and tx is not None:
                self._shared.drop(tx._rows)

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with self._sessions() as session:
            yield session

    def _read_rows(self, work: Callable[[Connection], T]) -> T:
        """A read on a plain connection (no ORM objects: building them cost more than the query),
        retried once on a connection the database had dropped (a restart, an idle timeout)."""
        try:
            with self.engine.connect() as conn:
                return work(conn)
        except DBAPIError as e:
            if not e.connection_invalidated:
                raise
            log.warning("database connection was lost; reading again on a new one")
        with self.engine.connect() as conn:
            return work(conn)

    def get(self, job_id: str) -> JobRecord | None:
        def read(conn: Connection) -> JobRecord | None:
            row = conn.execute(select(_JOBS).where(_JOBS.c.id == job_id)).one_or_none()
            return None if row is None else to_record(row, _labels_by_pk(conn, [row.pk])[row.pk])

        return self._read_rows(read)

    @property
    def shares_reads(self) -> bool:
        return self._shared is not None

    def shared_record(self, job_id: str) -> JobRecord | None:
        """The job's record if it is held in memory (no I/O; None: ask read_shared). Never change it."""
        return None if self._shared is None else self._shared.get(job_id)

    def read_shared(self, job_id: str) -> JobRecord | None:
        """get(), keeping what it read for shared_record (when shared reads are on). Never change it."""
        if self._shared is None:
            return self.get(job_id)
        generation = self._shared.generation
        record = self.get(job_id)
        if record is not None:
            self._shared.put(record, read_at_generation=generation)
        return record

    def list_jobs_shared(self, filters: JobFilters, *, before_pk: int | None, limit: int) -> list[tuple[int, JobRecord]]:
        """list_jobs, reading only the page's ids and the records not held in memory (then kept).
        Never change the records."""
        shared = self._shared
        if shared is None:
            return self.list_jobs(filters, before_pk=before_pk, limit=limit)
        page = self._page(filters, before_pk, limit, _JOBS.c.pk, _JOBS.c.id)

        def read(conn: Connection) -> list[tuple[int, JobRecord]]:
            generation = shared.generation
            ids = conn.execute(page).all()
            found = {job_id: record for _, job_id in ids if (record := shared.get(job_id)) is not None}
            missing = [job_id for _, job_id in ids if job_id not in found]
            if missing:
                rows = conn.execute(select(_JOBS).where(_JOBS.c.id.in_(missing))).all()
                labels = _labels_by_pk(conn, [row.pk for row in rows])
                for row in rows:
                    found[row.id] = record = to_record(row, labels[row.pk])
                    shared.put(record, read_at_generation=generation)
            return [(pk, found[job_id]) for pk, job_id in ids if job_id in found]

        return self._read_rows(read)

    def list_jobs(self, filters: JobFilters, *, before_pk: int | None, limit: int) -> list[tuple[int, JobRecord]]:
        return self._read_records(self._page(filters, before_pk, limit, _JOBS))

    def _read_records(self, stmt: Any) -> list[tuple[int, JobRecord]]:
        """(pk, record) of each job row `stmt` selects, with the labels of all of them in one more query."""

        def read(conn: Connection) -> list[tuple[int, JobRecord]]:
            rows = conn.execute(stmt).all()
            labels = _labels_by_pk(conn, [row.pk for row in rows])
            return [(row.pk, to_record(row, labels[row.pk])) for row in rows]

        return self._read_rows(read)

    @staticmethod
    def _page(filters: JobFilters, before_pk: int | None, limit: int, *columns: Any) -> Any:
        stmt = select(*columns).order_by(_JOBS.c.pk.desc()).limit(limit)
        if before_pk is not None:
            stmt = stmt.where(_JOBS.c.pk < before_pk)
        if filters.phase is not None:
            stmt = stmt.where(_JOBS.c.phase == filters.phase.value)
        if filters.team is not None:
            stmt = stmt.where(_JOBS.c.team == filters.team)
        if filters.name is not None:
            stmt = stmt.where(_JOBS.c.name == filters.name)
        for key, value in filters.labels:
            stmt = stmt.where(exists().where(_LABELS.c.job_pk == _JOBS.c.pk, _LABELS.c.key == key, _LABELS.c.value == value))
        return stmt

    def list_active(self) -> list[JobRecord]:
        terminal = [p.value for p in TERMINAL]
        active = select(_JOBS).where(_JOBS.c.phase.not_in(terminal)).order_by(_JOBS.c.pk)
        return [record for _, record in self._read_records(active)]

    def job_versions(self, phases: Collection[JobPhase]) -> dict[str, tuple[JobPhase, int]]:
        # Three narrow columns by the phase index: cheap enough for the progress poller's every round.
        stmt = (
            select(_JOBS.c.id, _JOBS.c.phase, _JOBS.c.last_event_seq)
            .where(_JOBS.c.phase.in_([p.value for p in phases]))
            .order_by(_JOBS.c.pk)
        )
        return self._read_rows(lambda conn: {job_id: (JobPhase(phase), seq) for job_id, phase, seq in conn.execute(stmt)})

    def count_by_phase(self) -> dict[str, int]:
        with self._read() as s:
            return {phase: count for phase, count in s.execute(select(JobRow.phase, func.count()).group_by(JobRow.phase))}

    def events_after(self, after_seq: int, *, job_id: str | None = None, team: str | None = None, limit: int = 500) -> list[JobEvent]:
        stmt = select(JobEventRow).where(JobEventRow.seq > after_seq).order_by(JobEventRow.seq).limit(limit)
        if job_id is not None:
            stmt = stmt.where(JobEventRow.job_id == job_id)
        if team is not None:
            stmt = stmt.where(JobEventRow.team == team)
        with self._read() as s:
            return [JobEvent(seq=r.seq, job_id=r.job_id, team=r.team, kind=r.kind, time=r.time, data=r.data) for r in s.scalars(stmt).all()]

    def events_of_kind(self, kind: str, job_ids: Collection[str]) -> list[JobEvent]:
        """Every `kind` event of these jobs, oldest first (by seq). Read by job id (ix_job_events_job_seq),
        in chunks that keep a statement's parameters well under every database's limit."""
        ids = sorted(set(job_ids))
        found: list[JobEvent] = []
        with self._read() as s:
            for start in range(0, len(ids), _IDS_PER_STATEMENT):
                chunk = ids[start : start + _IDS_PER_STATEMENT]
                stmt = select(JobEventRow).where(JobEventRow.job_id.in_(chunk), JobEventRow.kind == kind)
                found += [
                    JobEvent(seq=r.seq, job_id=r.job_id, team=r.team, kind=r.kind, time=r.time, data=r.data) for r in s.scalars(stmt).all()
                ]
        return sorted(found, key=lambda e: e.seq)

    def max_event_seq(self) -> int:
        with self._read() as s:
            return s.scalar(select(func.coalesce(func.max(JobEventRow.seq), 0))) or 0

    def metric_points(self, job_id: str, *, limit: int) -> list[MetricPoint]:
        """The newest `limit` points, oldest first."""
        newest = select(MetricPointRow).where(MetricPointRow.job_id == job_id).order_by(MetricPointRow.id.desc()).limit(limit)
        with self._read() as s:
            rows = list(reversed(s.scalars(newest).all()))
            return [MetricPoint(kind=r.kind, step=r.step, time=r.time, values=r.values) for r in rows]

    def suite_versions(self, scope: str, name: str) -> list[SuiteVersion]:
        with self._read() as s:
            return suite_versions(s, scope, name)

    def take_term(self, holder: str, now: datetime) -> int:
        with self.transaction() as tx:
            return take_term(tx.session, holder, now)

    def add_token(self, token: TokenRecord, token_hash: str) -> None:
        with self.transaction() as tx:
            tx.session.add(
                TokenRow(
                    id=token.id,
                    token_hash=token_hash,
                    team=token.team,
                    name=token.name,
                    admin=token.admin,
                    created_at=token.created_at,
                    revoked_at=None,
                )
            )

    def token_by_hash(self, token_hash: str) -> TokenRecord | None:
        stmt = select(_TOKENS).where(_TOKENS.c.token_hash == token_hash)
        row = self._read_rows(lambda conn: conn.execute(stmt).one_or_none())
        return None if row is None else _token(row)

    def revoke_token(self, token_id: str, when: datetime) -> bool:
        with self.transaction() as tx:
            result = tx.session.execute(
                update(TokenRow).where(TokenRow.id == token_id, TokenRow.revoked_at.is_(None)).values(revoked_at=when)
            )
            # SQLAlchemy types session.execute as the generic Result; an UPDATE's is a CursorResult.
            if not isinstance(result, CursorResult):
                raise TypeError(f"an UPDATE returned {type(result).__name__}, not a CursorResult")
            return bool(result.rowcount)

    def list_tokens(self) -> list[TokenRecord]:
        with self._read() as s:
            return [_token(r) for r in s.scalars(select(TokenRow).order_by(TokenRow.created_at)).all()]

    def close(self) -> None:
        self.engine.dispose()


def _token(row: TokenRow | Row[Any]) -> TokenRecord:
    return TokenRecord(id=row.id, team=row.team, name=row.name, admin=row.admin, created_at=row.created_at, revoked_at=row.revoked_at)
