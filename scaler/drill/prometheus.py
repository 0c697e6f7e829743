"""The drill's Prometheus (Debian's ``prometheus`` and ``promtool``): the trace backfilled at its own timestamps,
and a live series scraped from the drill.

* ``drill_requests_total{scenario=...}``: the trace as a counter sampled every 15 s of trace time (linear inside
  each tick, so ``rate(x[w])`` is the trace's mean over w), written as OpenMetrics and turned into TSDB blocks
  by ``promtool tsdb create-blocks-from openmetrics`` before Prometheus starts. forescale queries it at its own
  (compressed) clock with ``time=``: a query at trace time t sees exactly the samples up to t.
* ``drill_observed_rate{scenario=...}``: the trace's mean rate over the last 2 min of trace time, served by the
  drill's exporter and scraped every second of wall time. It is for KEDA's own ``prometheus`` scaler, which
  queries at the wall clock; the blocks lie in the past of the wall clock, so the scrapes never collide with them.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

import numpy as np
import yaml

from .procs import DrillError, Supervisor

SAMPLE_SECONDS = 15.0
RATE_WINDOW = 120.0


def find(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise DrillError(f"`{binary}` not found: the drill needs Debian's prometheus package (prometheus and promtool;"
                         f" `bash tests/system-deps.sh` installs it)")
    return path


def counter(t: np.ndarray, rate: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Counter samples every ``SAMPLE_SECONDS`` over a trace of rates on intervals ``[t_i, t_i + step)``:
    the requests arrived since the trace's start (NaN rates count as none)."""
    r = np.nan_to_num(np.asarray(rate, dtype=np.float64), nan=0.0).clip(min=0)
    knots = np.concatenate([t, [t[-1] + step]])
    cum = np.concatenate([[0.0], np.cumsum(r * step)])
    first = np.ceil(knots[0] / SAMPLE_SECONDS) * SAMPLE_SECONDS
    ts = np.arange(first, knots[-1] + 1e-9, SAMPLE_SECONDS)
    return ts, np.interp(ts, knots, cum)


def openmetrics(series: dict[str, tuple[np.ndarray, np.ndarray]], name: str = "drill_requests") -> str:
    """One counter family, one series per scenario label."""
    lines = [f"# TYPE {name} counter", f"# HELP {name} requests of the drill's trace"]
    for label, (ts, vs) in series.items():
        lines.extend(f'{name}_total{{scenario="{label}"}} {v:.6f} {t:.3f}' for t, v in zip(ts, vs))
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


class Exporter:
    """``/metrics`` with ``drill_observed_rate{scenario}`` from a function of the wall clock, on 127.0.0.1."""

    def __init__(self, port: int, rates: Callable[[], dict[str, float]]):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = "".join(f'drill_observed_rate{{scenario="{k}"}} {v:.6f}\n' for k, v in outer.rates().items())
                data = ("# TYPE drill_observed_rate gauge\n" + body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.rates = rates
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="drill-exporter", daemon=True)

    def start(self) -> "Exporter":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def start(sup: Supervisor, work: Path, port: int, exporter_port: int,
          series: dict[str, tuple[np.ndarray, np.ndarray]]) -> str:
    """Backfill ``series`` and start Prometheus on 127.0.0.1:``port``; returns its URL."""
    promtool, prometheus = find("promtool"), find("prometheus")
    data = work / "prometheus"
    data.mkdir(parents=True, exist_ok=True)
    om = work / "trace.om"
    om.write_text(openmetrics(series))
    out = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=720h",
                          str(om), str(data)], capture_output=True, text=True)
    if out.returncode != 0:
        raise DrillError(f"promtool could not backfill the trace: {(out.stderr or out.stdout).strip()[-500:]}")
    config = work / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "drill", "scrape_interval": "1s", "scrape_timeout": "1s",
                            "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}]}))
    proc = sup.start("prometheus", [prometheus, f"--config.file={config}", f"--storage.tsdb.path={data}",
                                    "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}",
                                    "--log.level=warn"])
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        with urllib.request.urlopen(url + "/-/ready", timeout=3) as r:
            return r.status == 200

    sup.wait_ready(proc, ready, 60, "ready")
    return url
