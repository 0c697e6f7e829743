"""``forescale probe --watch URL``: time an external OpenAI-compatible model server's cold start.

Run as a sidecar next to vLLM, TGI, SGLang or Triton (any server with a
health endpoint and ``POST /v1/completions``). From the sidecar's own start
(the pod's containers start together) it polls the server every
``interval`` seconds:

1. ``health``: until ``GET URL + health_path`` answers 200 (the server is up:
   image pulled, weights loaded, engine built);
2. ``first_completion``: then until a ``POST URL/v1/completions`` of one token
   succeeds (200 with ``choices``): compile, CUDA graph capture and the first
   request's own warm-up.

T_cold = health + first_completion (+ the given image pull and scheduling
seconds). It exports the same ``/metrics`` (``forescale_cold_start_seconds
{model,device,phase}``, phase ``health``, ``first_completion``, ``total``) and
``/health/{startup,ready,live}`` as the in-process probe (``ProbeServer``), so
the scaler's ``coldStartQuery`` works unchanged. Both times are measured
within one poll interval: a poll starts at most ``interval`` after the
previous one, and a completion is timed to its answer.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Callable
from urllib.parse import urlparse

from .errors import ProbeError
from .metrics import ProbeMetrics
from .runner import ProbeState

if TYPE_CHECKING:
    from .server import ProbeServer

PHASES = ("health", "first_completion")
COMPLETION_TIMEOUT = 120.0  # one completion may take this long (a first request compiles)
MAX_ANSWER = 1 << 20  # bytes read from an answer


def parse_url(url: str) -> str:
    u = urlparse(url)
    if u.scheme not in ("http", "https") or not u.hostname or u.username or u.password or u.query:
        raise ProbeError(f"--watch {url[:200]!r}: accepted: the model server's base URL, http(s)://host:port "
                         "(no user:password, no query), e.g. http://127.0.0.1:8000", param="--watch")
    return url.rstrip("/")


class Watcher:
    """Duck-types what ``ProbeServer`` needs of a ``Probe``: ``metrics``, ``state()``, ``report()``, ``completions()``."""

    watching = True

    def __init__(self, url: str, *, model_name: str | None = None, label: str | None = None, health_path: str = "/health",
                 interval: float = 1.0, image_pull_seconds: float = 0.0, scheduling_seconds: float = 0.0,
                 clock: Callable[[], float] = time.monotonic, registry=None):
        self.url = parse_url(url)
        if not health_path.startswith("/"):
            raise ProbeError(f"--watch-health {health_path[:100]!r}: accepted: a path such as /health or "
                             "/v2/health/ready", param="--watch-health")
        self.health_path, self.interval, self.model_name = health_path, interval, model_name
        self.extras = (image_pull_seconds, scheduling_seconds)
        self.clock = clock
        self.metrics = ProbeMetrics(label or model_name or "watched", registry)
        self.metrics.device = "external"
        self._lock = threading.Lock()
        self._state = "pending"
        self._reason: str | None = "not started"
        self._phases: dict[str, float] = {}
        self._ready = False
        self._done = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started: float | None = None
        self._server: ProbeServer | None = None

    # -- what ProbeServer reads -----------------------------------------------------------------------------------
    def state(self) -> ProbeState:
        with self._lock:
            total = self._total() if self._ready else None
            return ProbeState(self._state, self._state if not self._ready else None, self._ready, True, self._reason,
                              dict(self._phases), total)

    def report(self) -> dict | None:
        if not self._done.is_set():
            return None
        with self._lock:
            return {"watched": self.url, "model": self.metrics.model, "phases": dict(self._phases),
                    "t_cold_seconds": self._total(), "image_pull_seconds": self.extras[0],
                    "scheduling_seconds": self.extras[1], "poll_interval_seconds": self.interval}

    def completions(self, *args, **kwargs):
        return None  # completions go to the watched server, not to this sidecar

    @property
    def ready(self) -> bool:
        return self._ready

    def _total(self) -> float:
        return sum(self._phases.values()) + sum(self.extras)

    # -- running --------------------------------------------------------------------------------------------------
    def serve(self, host: str, port: int):
        from .server import ProbeServer

        self._server = ProbeServer(self, host, port).start()
        return self._server

    def start(self, started_at: float | None = None) -> "Watcher":
        """Watch in a background thread; ``started_at`` (this clock): the container's start, default now."""
        self._started = self.clock() if started_at is None else started_at
        self._thread = threading.Thread(target=self._run, name="forescale-watch", daemon=True)
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._ready, self._state, self._reason = False, "stopping", "shutting down"
        self.metrics.set_ready(False)
        self.metrics.set_state("stopping")
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._server is not None:
            self._server.stop()

    def _set(self, state: str, reason: str) -> None:
        with self._lock:
            self._state, self._reason = state, reason
        self.metrics.set_state(state)

    def _run(self) -> None:
        t0 = self._started
        assert t0 is not None  # start() set it
        self._set("watch_health", f"waiting for {self.url}{self.health_path} to answer 200")
        while not self._stop.is_set():
            ok, why = self._health()
            if ok:
                break
            self._set("watch_health", f"waiting for {self.url}{self.health_path} to answer 200 (last: {why})")
            self._stop.wait(self._next(t0))
        if self._stop.is_set():
            return
        healthy_at = self.clock()
        self._phase("health", healthy_at - t0)
        model = self.model_name
        self._set("watch_completion", "waiting for a first successful completion")
        while not self._stop.is_set():
            if model is None:
                model = self._served_model()
            ok, why = self._complete(model)
            if ok:
                break
            self._set("watch_completion", f"waiting for a first successful completion (last: {why})")
            self._stop.wait(self.interval)
        if self._stop.is_set():
            return
        self._phase("first_completion", self.clock() - healthy_at)
        with self._lock:
            self._ready, self._state, self._reason = True, "ready", None
        m, d = self.metrics.model, self.metrics.device
        self.metrics.cold.labels(m, d, "image_pull").set(self.extras[0])
        self.metrics.cold.labels(m, d, "scheduling").set(self.extras[1])
        self.metrics.cold.labels(m, d, "total").set(self._total())
        self.metrics.set_ready(True)
        self.metrics.set_state("ready")
        self._done.set()

    def _next(self, t0: float) -> float:
        """Seconds to the next poll: polls on a grid of ``interval`` from t0, so none is more than one interval late."""
        elapsed = self.clock() - t0
        return max(0.0, self.interval - elapsed % self.interval)

    def _phase(self, name: str, seconds: float) -> None:
        with self._lock:
            self._phases[name] = seconds
        self.metrics.set_phase(name, seconds)

    # -- HTTP ----------------------------------------------------------------------------------------------------
    def _health(self) -> tuple[bool, str]:
        try:
            with urllib.request.urlopen(self.url + self.health_path, timeout=max(self.interval, 1.0)) as r:
                return r.status == 200, f"HTTP {r.status}"
        except urllib.error.HTTPError as e:
            return False, f"HTTP {e.code}"
        except (urllib.error.URLError, OSError) as e:
            return False, type(getattr(e, "reason", e)).__name__

    def _served_model(self) -> str | None:
        """The first model id of GET /v1/models (vLLM and SGLang need the served name), else None."""
        try:
            with urllib.request.urlopen(self.url + "/v1/models", timeout=max(self.interval, 1.0)) as r:
                ids = [m.get("id") for m in json.loads(r.read(MAX_ANSWER)).get("data", []) if isinstance(m, dict)]
        except (urllib.error.URLError, OSError, ValueError, AttributeError):
            return None
        return next((i for i in ids if isinstance(i, str)), None)

    def _complete(self, model: str | None) -> tuple[bool, str]:
        body = {"prompt": "Hello", "max_tokens": 1, "temperature": 0}
        if model is not None:
            body["model"] = model
        req = urllib.request.Request(self.url + "/v1/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=COMPLETION_TIMEOUT) as r:
                doc = json.loads(r.read(MAX_ANSWER))
            if r.status == 200 and isinstance(doc, dict) and doc.get("choices"):
                return True, "ok"
            return False, f"HTTP {r.status} without choices"
        except urllib.error.HTTPError as e:
            return False, f"HTTP {e.code}"
        except (urllib.error.URLError, OSError) as e:
            return False, type(getattr(e, "reason", e)).__name__
        except ValueError:
            return False, "an answer that is not JSON"


def process_started() -> float:
    """When this process started, on ``time.monotonic``'s clock (Linux: /proc/self/stat's starttime against
    /proc/uptime, both since boot), so the interpreter's own start-up counts; elsewhere: now."""
    now = time.monotonic()
    try:
        import os

        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return now
    return now - age if 0 <= age < 3600 else now


def watch_main(ctx, url, health_path, served_model, interval, label, image_pull, scheduling, host, port, json_path,
               exit_after_warmup) -> None:
    """The CLI's --watch: serve, watch, print the result, stay up (a sidecar) until SIGTERM."""
    import signal

    import click

    from .exits import ProbeFailed, write_json

    started = process_started()  # the container's start: this process's own (the sidecar's entrypoint)
    try:
        w = Watcher(url, model_name=served_model, label=label, health_path=health_path, interval=interval,
                    image_pull_seconds=image_pull, scheduling_seconds=scheduling)
        server = w.serve(host, port)
    except ProbeError as exc:
        raise ProbeFailed(exc)
    click.echo(f"forescale probe: watching {w.url}; serving {server.url} (/health/startup, /health/ready, "
               "/health/live, /metrics, /report)", err=True)
    stop = threading.Event()
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
        except ValueError:
            pass
    try:
        w.start(started_at=started)
        while not stop.is_set() and not w.wait(0.2):
            pass
        if w.ready:
            rep = w.report()
            assert rep is not None  # done: ready is set just before
            click.echo(f"T_cold {rep['t_cold_seconds']:.1f} s: health {rep['phases']['health']:.1f} s, first completion "
                       f"{rep['phases']['first_completion']:.1f} s")
            if json_path is not None:
                write_json(json_path, rep)
        if not exit_after_warmup:
            stop.wait()
    finally:
        w.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
