"""API tokens: random secrets shown once, stored as sha256 hashes, each belonging to one team.

sha256 (not a slow password hash) is right here: tokens are 32 random bytes, so there is nothing to
brute-force, and a hash lookup per request must be cheap.

Authenticated tokens are remembered per process (TokenCache) for a few seconds, so a status poll costs
no database round trip. A revocation through this process's TokenService takes effect at once; one
made elsewhere (`rljob token revoke`, another replica) reaches this process within the cache's TTL.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from service.domain.records.errors import InvalidRequest, Unauthenticated
from service.domain.records.models import Caller, TokenRecord
from service.domain.records.ports import Clock, JobStore, utc_now
from trainer.contract.spec.dns_label import is_dns_label

TOKEN_PREFIX = "rlj_"
MIN_TOKEN_CHARS = 32


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class TokenCache:
    """Token records by token hash (never the token), least recently used dropped first, each trusted
    for `ttl_s` after it was read from the store. Thread-safe: sync routes run on a thread pool."""

    def __init__(self, size: int, ttl_s: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.size, self.ttl_s, self._monotonic = size, ttl_s, monotonic
        self._entries: OrderedDict[str, tuple[float, TokenRecord]] = OrderedDict()
        self._lock = threading.Lock()
        # Bumped by every drop: a store read that began before a revocation must not be cached after it.
        self._generation = 0

    @property
    def generation(self) -> int:
        return self._generation

    def get(self, token_hash: str) -> TokenRecord | None:
        with self._lock:
            entry = self._entries.get(token_hash)
            if entry is None:
                return None
            if self._monotonic() >= entry[0]:
                del self._entries[token_hash]
                return None
            self._entries.move_to_end(token_hash)
            return entry[1]

    def put(self, token_hash: str, record: TokenRecord, *, read_at_generation: int) -> None:
        if self.size == 0 or self.ttl_s == 0:
            return
        with self._lock:
            if read_at_generation != self._generation:
                return
            self._entries[token_hash] = (self._monotonic() + self.ttl_s, record)
            self._entries.move_to_end(token_hash)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def drop_token(self, token_id: str) -> None:
        with self._lock:
            self._generation += 1
            for token_hash in [h for h, (_, record) in self._entries.items() if record.id == token_id]:
                del self._entries[token_hash]

    def __len__(self) -> int:
        return len(self._entries)


class TokenService:
    def __init__(self, store: JobStore, clock: Clock = utc_now, *, cache: TokenCache | None = None) -> None:
        self.store = store
        self.clock = clock
        self.cache = cache if cache is not None else TokenCache(size=0, ttl_s=0)  # an empty cache is falsy

    def create(self, team: str, *, name: str = "", admin: bool = False, token: str | None = None) -> tuple[str, TokenRecord]:
        """Create a token for `team`; returns (the secret, shown only now, and its record)."""
        if not is_dns_label(team):
            raise InvalidRequest(("team",), "a team is a DNS label: lowercase letters, digits and '-'")
        secret = token or generate_token()
        if len(secret) < MIN_TOKEN_CHARS:
            raise InvalidRequest(("token",), f"a token needs at least {MIN_TOKEN_CHARS} characters")
        record = TokenRecord(id="tok_" + secrets.token_hex(6), team=team, name=name, admin=admin, created_at=self.clock())
        self.store.add_token(record, hash_token(secret))
        return secret, record

    def ensure(self, token: str, team: str, *, admin: bool = False, name: str = "bootstrap") -> TokenRecord:
        """Make sure `token` exists (for the embedded default's printed token); idempotent."""
        existing = self.store.token_by_hash(hash_token(token))
        if existing is not None and existing.revoked_at is None:
            return existing
        return self.create(team, name=name, admin=admin, token=token)[1]

    def revoke(self, token_id: str) -> bool:
        revoked = self.store.revoke_token(token_id, self.clock())
        self.cache.drop_token(token_id)  # also when already revoked elsewhere: stop trusting it here now
        return revoked

    def list(self) -> list[TokenRecord]:
        return self.store.list_tokens()

    def cached_caller(self, authorization: str | None) -> Caller | None:
        """The caller if its token was authenticated within the TTL, without I/O; None: ask authenticate().
        A malformed header is refused here already."""
        record = self.cache.get(_token_hash(authorization))
        return None if record is None else _caller(record)

    def authenticate(self, authorization: str | None) -> Caller:
        token_hash = _token_hash(authorization)
        record = self.cache.get(token_hash)
        if record is None:
            generation = self.cache.generation
            record = self.store.token_by_hash(token_hash)
            if record is None or record.revoked_at is not None:
                raise Unauthenticated("the token is unknown or revoked; ask an admin for a new one (rljob token create)")
            self.cache.put(token_hash, record, read_at_generation=generation)
        return _caller(record)


def _token_hash(authorization: str | None) -> str:
    if not authorization:
        raise Unauthenticated()
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("use the Authorization header with the Bearer scheme: 'Bearer <token>'")
    return hash_token(token.strip())


def _caller(record: TokenRecord) -> Caller:
    return Caller(team=record.team, token_id=record.id, admin=record.admin, name=record.name)
