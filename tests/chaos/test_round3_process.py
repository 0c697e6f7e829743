"""Issue 40 (hardening round 3) against the real ``forescale serve`` process and the real tuning worker: stray signals
no longer kill it, a forged state file is not believed and a symlinked temporary file is not written through, a
tuning run past its bounds gives up and says so."""

from __future__ import annotations

import json
import signal
import time
import urllib.request

import pytest

from scaler.serve.forecastdoc import forecast_key_hash
from scaler.serve.registry import metadata_digest
from scaler.serve.state import file_name
from scaler.spec import parse_metadata
from support import promfixture as pf
from support.fakes import sample_value
from support.live import FLAT_QPS, Vitals, health, metadata
from support.serveproc import Serve

FIT = {"mode": "forecastAndScale", "model": "naive", "history": "1h", "minHistory": "30m", "refitInterval": "10s",
       "levelCorrection": "0", "tuning": "off"}


def test_stray_signals_do_not_kill_the_server(live_prom, tmp_path):
    """Item 11: SIGHUP, SIGUSR1 and SIGUSR2 killed the server at once (no NOT_SERVING, no drain). Now SIGUSR1 dumps
    every thread's stack and the others are ignored, logged; it serves on, SERVING."""
    s = Serve(tmp_path)
    try:
        s.ready()
        md = metadata(live_prom.url)
        assert s.get(md, "victim") == pytest.approx(FLAT_QPS)
        for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
            s.proc.send_signal(sig)
            time.sleep(0.5)
            assert s.proc.poll() is None, sig
            assert s.get(md, "victim") == pytest.approx(FLAT_QPS) and health(s.channel) == "SERVING"
    finally:
        out = s.close()
    assert out.count("received SIGHUP: ignored") == 2 and "received SIGUSR2: ignored" in out
    assert "Thread 0x" in out and "most recent call first" in out  # SIGUSR1: the stacks


def test_a_forged_state_file_is_not_believed_and_a_planted_link_is_not_written_through(live_prom, tmp_path):
    """Item 12: a forged forecast file (its key a plain sha256 of metadata anyone can read) made a trigger with a
    true rate of 5 answer 78.1 after a restart, reason forecast; and the next write's <name>.tmp replaced by a
    symlink made forescale overwrite a file outside the state dir. Now documents carry an HMAC with the scaler's key
    and are written through the directory with O_EXCL|O_NOFOLLOW."""
    md = metadata(live_prom.url, **FIT)
    spec, _ = parse_metadata(md, name="forged", namespace="chaos")
    name = file_name("chaos", "forged", f"{spec.metric_name}.{metadata_digest(md)[:32]}")
    state = tmp_path / "state"
    state.mkdir()
    now = time.time()
    forged = {"version": 1, "namespace": "chaos", "name": "forged", "metric": name, "key": forecast_key_hash(spec),
              "fitted_at": now - 5, "model": "naive", "history_max": 100.0, "fit_seconds": 0.01,
              "forecast": {"t": [now + 60 * i for i in range(-5, 300)], "mean": [78.1] * 305,
                           "quantiles": {"0.1": [78.1] * 305, "0.5": [78.1] * 305, "0.8": [78.1] * 305,
                                         "0.9": [78.1] * 305}}, "model_state": None}
    (state / name).write_text(json.dumps(forged))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (state / (name + ".tmp")).symlink_to(victim)  # the next write's temporary file, a link out of the state dir
    s = Serve(tmp_path)
    try:
        s.ready()
        values = [s.get(md, "forged")]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (state / name).read_text().count('"hmac"'):
            time.sleep(0.5)  # the first fit's document, written over the forged one
            values.append(s.get(md, "forged"))
        assert '"hmac"' in (state / name).read_text(), "no fit written within 60 s"
        values.append(s.get(md, "forged"))
    finally:
        out = s.close()
    assert all(v == pytest.approx(FLAT_QPS) for v in values), values  # never the forged 78.1
    assert "not signed with this scaler's state key" in out
    assert victim.read_text() == "precious" and not (state / name).is_symlink()


def test_a_tuning_run_past_its_bound_gives_up_and_the_server_serves_on(live_scaler):
    """Item 14: a pathological trace under tuning: auto ran past 420 s with a 251 MB helper. Now a run is bounded
    (300 s and 1 GiB by default; here 64 MiB so that every real run goes over): its worker is killed, the run
    counted gave_up and noted in the decision log with why; the victims and health are untouched."""
    now = time.time()
    t = pf.sample_times(now - 8 * 3600, now + 600)
    prom = pf.PrometheusServer([pf.SeriesSpec("chaos_requests", {"job": "flat"}, "counter", t,
                                              pf.counter_from_rate(t, FLAT_QPS))]).start()
    try:
        s = live_scaler(tuning_max_rss_bytes=64 << 20)
        vitals = Vitals()
        md = metadata(prom.url, history="6h", tuningMinHistory="4h", minHistory="1h", hpaTolerance=None,
                      mode=None)
        md = {k: v for k, v in md.items() if v is not None}
        assert s.get(md, "tuned") == pytest.approx(FLAT_QPS)
        deadline = time.monotonic() + 120
        reg = s.server.metrics.registry
        while not sample_value(reg, "forescale_tuning_runs_total",
                               {"namespace": "chaos", "scaledobject": "tuned", "outcome": "gave_up"}):
            assert time.monotonic() < deadline, "the tuning run did not give up within 120 s"
            assert s.get(metadata(prom.url), "victim") == pytest.approx(FLAT_QPS)
            assert health(s.channel) == "SERVING"
            vitals.sample()
            time.sleep(0.5)
        log = json.loads(urllib.request.urlopen(
            f"http://127.0.0.1:{s.server.http_port}/api/scaledobjects/chaos/tuned/decisions", timeout=5).read())
        (run,) = [r for r in log["triggers"][0]["tuning"] if r["outcome"] == "gave_up"]
        assert "over its 64 MiB" in run["why"]
    finally:
        prom.stop()
    print(f"tuning bounds: {run['why']}; {vitals.figures()}")
