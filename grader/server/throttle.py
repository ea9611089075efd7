"""Who the client is, and how many failed authentications its address may make.

* :class:`TrustedProxies` — the client address is the TCP peer, unless the peer is one of the
  configured reverse proxies (``GRADER_TRUSTED_PROXIES``): then werkzeug's ``ProxyFix`` takes
  the client from the last ``X-Forwarded-For`` hop. From anyone else the header is ignored, so
  a client cannot pick its own address (and with it a fresh rate-limit bucket).
* :class:`AuthFailureGuard` — failed authentications (a bearer or login token that matches no
  active user) are counted per client address in Redis (``GRADER_AUTH_FAILURE_LIMIT``, e.g. 30
  per minute). Past the limit every token-carrying request from that address gets 429
  *before* its token is looked up, so guessing costs no database lookup and learns nothing.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from flask import request
from limits import parse
from limits.strategies import RateLimiter
from werkzeug.middleware.proxy_fix import ProxyFix

from grader.settings import IPNetwork

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

log = logging.getLogger("grader.server")


def _parse_address(address: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(address or "")
    except ValueError:
        return None


class TrustedProxies:
    """WSGI middleware: believe ``X-Forwarded-For``/``-Proto`` only from trusted peers."""

    def __init__(self, app: WSGIApplication, networks: Iterable[IPNetwork]) -> None:
        self.app = app
        self.networks = tuple(networks)
        self.proxied = ProxyFix(app, x_for=1, x_proto=1, x_host=0, x_port=0, x_prefix=0)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        peer = _parse_address(environ.get("REMOTE_ADDR"))
        if peer is not None and any(peer in network for network in self.networks):
            return self.proxied(environ, start_response)
        return self.app(environ, start_response)


def client_address() -> str:
    """This request's client address (after :class:`TrustedProxies`)."""
    return request.remote_addr or "unknown"


def direct_from_loopback() -> bool:
    """The client is this host itself, not a request relayed by a proxy.

    A request carrying forwarding headers was relayed (a proxy on this host that is not listed
    in ``GRADER_TRUSTED_PROXIES``), so it does not count as local.
    """
    address = _parse_address(request.remote_addr)
    relayed = "X-Forwarded-For" in request.headers or "Forwarded" in request.headers
    return address is not None and address.is_loopback and not relayed


class AuthFailureGuard:
    """Failed authentications per client address, counted in the rate limiter's Redis.

    Only addresses that failed recently in *this* process (remembered for two windows) are
    checked before a lookup, so an honest request costs no extra Redis round trip; an attacker
    gets at most one more lookup per server process once the shared count is over the limit.
    If Redis is unavailable the guard lets requests through, as the rate limiter does.
    """

    _MAX_REMEMBERED = 10_000

    def __init__(self, limiter: RateLimiter, limit: str, *, prefix: str) -> None:
        self.limiter = limiter
        self.item = parse(limit)
        self.prefix = prefix
        self._remember_seconds = 2.0 * self.item.get_expiry()
        self._recent: dict[str, float] = {}
        self._lock = threading.Lock()

    def _identifiers(self, address: str) -> tuple[str, str, str]:
        return (self.prefix, "auth-fail", address)

    def _failed_recently(self, address: str) -> bool:
        with self._lock:
            until = self._recent.get(address)
            if until is None:
                return False
            if until < time.monotonic():
                del self._recent[address]
                return False
            return True

    def _remember(self, address: str) -> None:
        now = time.monotonic()
        with self._lock:
            if len(self._recent) >= self._MAX_REMEMBERED:
                for stale in [key for key, until in self._recent.items() if until < now]:
                    del self._recent[stale]
                if len(self._recent) >= self._MAX_REMEMBERED:
                    self._recent.clear()  # a flood of addresses: start over (Redis still counts)
            self._recent[address] = now + self._remember_seconds

    def blocked(self, address: str) -> bool:
        """Whether ``address`` is over the limit (tokens from it are not even looked up)."""
        if not self._failed_recently(address):
            return False
        return self._over_limit(self.limiter.test, address)

    def failed(self, address: str) -> bool:
        """Count one failed authentication; True when ``address`` is now over the limit."""
        self._remember(address)
        return self._over_limit(self.limiter.hit, address)

    def _over_limit(self, ask: Callable[..., bool], address: str) -> bool:
        """``not ask(item, *identifiers)`` (test or hit), False when the limiter is down."""
        try:
            return not ask(self.item, *self._identifiers(address))
        except Exception as exc:
            log.warning("auth failure limit unavailable: %s", exc)
            return False

    def retry_after(self, address: str) -> int:
        """Seconds until ``address`` may try again."""
        try:
            reset = self.limiter.get_window_stats(self.item, *self._identifiers(address)).reset_time
        except Exception:
            return int(self.item.get_expiry())
        return max(1, int(reset - time.time()) + 1)
