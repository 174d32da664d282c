"""API tokens: random secrets shown once, stored as sha256 hashes, each belonging to one team.

sha256 (not a slow password hash) is right here: tokens are 32 random bytes, so there is nothing to
brute-force, and a hash lookup per request must be cheap.
"""

from __future__ import annotations

import hashlib
import secrets

from trainer.contract.dns_label import is_dns_label

from .errors import InvalidRequest, Unauthenticated
from .models import Caller, TokenRecord
from .ports import Clock, JobStore, utc_now

TOKEN_PREFIX = "rlj_"
MIN_TOKEN_CHARS = 32


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class TokenService:
    def __init__(self, store: JobStore, clock: Clock = utc_now) -> None:
        self.store = store
        self.clock = clock

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
        return self.store.revoke_token(token_id, self.clock())

    def list(self) -> list[TokenRecord]:
        return self.store.list_tokens()

    def authenticate(self, authorization: str | None) -> Caller:
        if not authorization:
            raise Unauthenticated()
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("use the Authorization header with the Bearer scheme: 'Bearer <token>'")
        record = self.store.token_by_hash(hash_token(token.strip()))
        if record is None or record.revoked_at is not None:
            raise Unauthenticated("the token is unknown or revoked; ask an admin for a new one (rljob token create)")
        return Caller(team=record.team, token_id=record.id, admin=record.admin, name=record.name)
