"""The shared real traces as the issue-11 benchmarks score them (``bench_anchors``, ``bench_default``).

Per trace: the file under the shared traces, qps per replica, and which days (the last 28, or a range);
the replay settings: T_cold 180 s, 7 days simulated, refit 2 h, minReplicaCount 1, maxReplicaCount 1000.
"""

from __future__ import annotations

from dataclasses import replace

from support.paths import TRACES

DAY = 86400.0
# name, file, qps per replica, which days (None: the last 28 days; (a, b): days a..b from the start)
TRACE_SPECS = [
    ("servegen_m-small", "servegen_m-small/per_10min.csv", 200.0, None),
    ("nab_tweets AMZN", "nab_tweets/AMZN_per_5min.csv", 0.25, None),
    ("nab_tweets GOOG", "nab_tweets/GOOG_per_5min.csv", 0.08, None),
    ("nab_tweets FB", "nab_tweets/FB_per_5min.csv", 0.2, None),
    ("nab_nyc_taxi", "nab_nyc_taxi/per_30min.csv", 1.0, None),
    ("worldcup98 days 40-68", "worldcup98/per_minute.csv", 20.0, (40, 68)),
]
MAX_REPLICAS = 1000


def load(name: str, rel: str, days):
    from forecaster.base import Series
    from scaler.cli import traces

    tr = traces.load_csv(TRACES / rel, name=name)
    s = tr.series
    if days is None:
        keep = s.t >= s.t[-1] + s.step - 28 * DAY
    else:
        keep = (s.t >= s.t[0] + days[0] * DAY) & (s.t < s.t[0] + days[1] * DAY)
    return replace(tr, series=Series(s.t[keep], s.y[keep], s.step))


def settings_for(qps: float):
    from scaler.replay import engine

    # maxReplicaCount high enough never to bind (KEDA's default 100 would cap worldcup98's 180-replica peak at
    # 20 req/s per replica, and every policy would miss the same requests)
    return engine.Settings(cold_start_seconds=180.0, qps_per_replica=qps, span_seconds=7 * DAY, refit_seconds=7200.0,
                           min_replicas=1, max_replicas=MAX_REPLICAS)
