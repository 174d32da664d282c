"""Connections on which no request has passed authentication yet, capped per peer and in total, so that nobody
without a token can hold the connection slots the teams need.

Why: the connection cap (connection_limits.py) counts every connection alike, so one client re-opening 1,000 idle
connections kept every team at 503 (89 of 90 GETs): a team's new connection found every slot taken by connections
that had never sent a byte. A connection cannot show its token before its first request, so each one counts here
from the moment it opens until a request on it passes the token check (the load shedder, api/overload.py, and the
route's own check, api/deps.py, call `mark_authenticated` through the request's scope).

Over a cap, the oldest idle connection of the group (its peer's, or all) is closed to make room: a flood then only
churns its own connections, while a team's new connection, whose request is already on its way, gets in, is
authenticated and leaves the count. Idle means no request in progress and no byte waiting to be read: in a burst the
event loop accepts many connections before it reads any, and a connection whose request is already in the socket
must not be taken for a silent one. When no connection of the group is idle, the new one is refused instead.

A peer is an IPv4 address, or the /64 of an IPv6 one (what a single host is usually handed).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Hashable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

CONNECTION_EXTENSION = "rljob.connection"  # scope["extensions"] key: {"authenticated": a callable}
IPV6_PEER_PREFIX = 64


def mark_authenticated(scope: MutableMapping[str, Any]) -> None:
    """Tell the connection this request came on that a request on it passed authentication (no-op when the
    server does not count connections: TestClient, another ASGI server)."""
    handle = scope.get("extensions", {}).get(CONNECTION_EXTENSION)
    if handle is not None:
        handle["authenticated"]()


def peer_key(host: str | None) -> str:
    """The group a connection's peer address counts in: the IPv4 address, or the IPv6 /64."""
    if not host:
        return ""  # a Unix socket: one group
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, IPV6_PEER_PREFIX), strict=False))
    return str(address)


@dataclass(frozen=True)
class Admission[C]:
    refused: bool  # no room could be made: the new connection must be refused
    evicted: tuple[C, ...] = ()  # the idle connections to close to make room (no longer counted)


@dataclass
class UnauthenticatedConnections[C: Hashable]:
    """The unauthenticated connections of one server, oldest first. One event loop uses it: no lock."""

    per_peer: int
    total: int
    _all: dict[C, str] = field(default_factory=dict)  # insertion order is age; the value is the peer's group
    _by_peer: dict[str, dict[C, None]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._all)

    def of_peer(self, host: str | None) -> int:
        return len(self._by_peer.get(peer_key(host), {}))

    def admit(self, conn: C, host: str | None, is_idle: Callable[[C], bool]) -> Admission[C]:
        """Count `conn` (just opened, from `host`) unless no room can be made; what to close to make it."""
        key = peer_key(host)
        evicted: list[C] = []
        if len(self._by_peer.get(key, {})) >= self.per_peer:
            victim = _oldest_idle(self._by_peer[key], is_idle, skip=evicted)
            if victim is None:
                return Admission(refused=True)
            evicted.append(victim)
        if len(self._all) - len(evicted) >= self.total:
            victim = _oldest_idle(self._all, is_idle, skip=evicted)
            if victim is None:
                return Admission(refused=True)
            evicted.append(victim)
        for victim in evicted:
            self.discard(victim)
        self._all[conn] = key
        self._by_peer.setdefault(key, {})[conn] = None
        return Admission(refused=False, evicted=tuple(evicted))

    def discard(self, conn: C) -> None:
        """`conn` is authenticated, or gone; it no longer counts (idempotent)."""
        key = self._all.pop(conn, None)
        if key is None:
            return
        peers = self._by_peer[key]
        del peers[conn]
        if not peers:
            del self._by_peer[key]


def _oldest_idle[C](conns: dict[C, Any], is_idle: Callable[[C], bool], skip: list[C]) -> C | None:
    return next((conn for conn in conns if conn not in skip and is_idle(conn)), None)
