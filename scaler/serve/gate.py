"""Fair shares of the scaler's I/O: work in flight per Prometheus host:port and per caller namespace, a query rate
per host:port.

Every background service that queries Prometheus (the observation refreshes, the fits' history queries, the
cold-start queries, the tuning runs) asks its ``Gate`` before it takes a thread: work for a host:port (or a
namespace) already at its limit is not started and stays due, holding no thread, until a slot frees (issue 40,
item 4: 256 triggers on one never-answering host:port, under 32 path spellings, held every refresh thread).
A host:port is the one the request goes to (``host_port``): ``http://a:9090/x`` and ``http://A:9090/y`` are one.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from urllib.parse import urlparse


@functools.lru_cache(maxsize=8192)
def host_port(url: str) -> str:
    """``scheme://host:port`` of ``url`` (lower-case, the default port filled in): what a limit counts by."""
    try:
        u = urlparse(url)
        port = u.port or (443 if u.scheme == "https" else 80)
        return f"{u.scheme.lower()}://{(u.hostname or '').lower().rstrip('.')}:{port}"
    except ValueError:
        return url


class Gate:
    """At most ``per_host`` pieces of work in flight per host:port and ``per_namespace`` per namespace, and (with
    ``rate``) at most ``rate`` starts per second per host:port (a token bucket of one second's burst). Thread-safe;
    ``enter`` never blocks: False means "not now", and the caller leaves the work due."""

    def __init__(self, per_host: int, per_namespace: int, rate: float | None = None):
        self.per_host, self.per_namespace, self.rate = per_host, per_namespace, rate
        self._lock = threading.Lock()
        self._hosts: Counter[str] = Counter()
        self._namespaces: Counter[str] = Counter()
        self._tokens: dict[str, tuple[float, float]] = {}  # host -> (tokens, at)
        self.refused = 0  # enters refused (a limit was reached)

    def enter(self, url: str, namespace: str, now: float, *, rated: bool = True) -> bool:
        return self.admit(url, namespace, now, rated=rated) is None

    def admit(self, url: str, namespace: str, now: float, *, rated: bool = True) -> str | None:
        """None: entered (``leave`` it once done); else the limit that refused it ("host", "namespace" or "rate").
        ``rated``: the start counts against the host's rate (a trigger's first refresh does not)."""
        host = host_port(url)
        with self._lock:
            if self._hosts[host] >= self.per_host:
                self.refused += 1
                return "host"
            if self._namespaces[namespace] >= self.per_namespace:
                self.refused += 1
                return "namespace"
            if self.rate is not None and rated:
                tokens, at = self._tokens.get(host, (self.rate, now))
                tokens = min(self.rate, tokens + max(0.0, now - at) * self.rate)
                if tokens < 1.0:
                    self._tokens[host] = (tokens, now)
                    self.refused += 1
                    return "rate"
                self._tokens[host] = (tokens - 1.0, now)
                if len(self._tokens) > 8192:  # bounded: drop the buckets that are full again
                    for h in [h for h, (t, a) in self._tokens.items() if t + (now - a) * self.rate >= self.rate]:
                        del self._tokens[h]
            self._hosts[host] += 1
            self._namespaces[namespace] += 1
            return None

    def leave(self, url: str, namespace: str) -> None:
        host = host_port(url)
        with self._lock:
            for counter, k in ((self._hosts, host), (self._namespaces, namespace)):
                counter[k] -= 1
                if counter[k] <= 0:
                    del counter[k]

    def in_flight(self, url: str | None = None) -> int:
        """Work in flight (to ``url``'s host:port, or in all)."""
        with self._lock:
            return self._hosts[host_port(url)] if url is not None else sum(self._hosts.values())

    def namespaces(self) -> dict[str, int]:
        with self._lock:
            return dict(self._namespaces)

