"""Issue 36 items 13-15: messages that misled or leaked. The rules, tested as rules: no secret of a URL in any
message; a URL, a file and every output are checked before the run and named with what is accepted; every float
option refuses inf and nan; a file's encoding and compression are read from its bytes, not its name."""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import click
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaler.cli import main
from scaler.cli.backtest import backtest_command
from scaler.cli.clitypes import FiniteRange
from scaler.cli.tune import tune_command

FAST = ["--model", "seasonal_naive", "--policies", "reactive", "--span", "12h", "--history", "1d", "--refit", "2h",
        "--qps-per-replica", "10", "--cold-start", "120", "--no-progress"]
TABLE = "viol min"  # a word of the policy table's header: present only when the replay ran


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def trace_text() -> str:
    t0 = 1_700_000_000 - 1_700_000_000 % 86400
    rows = ["timestamp,count"]
    for i in range(3 * 1440):  # 3 days per minute, a daily wave between 40 and 160 requests a minute
        rows.append(f"{t0 + 60 * i},{100 + 60 * np.sin(2 * np.pi * i / 1440):.0f}")
    return "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    p = tmp_path_factory.mktemp("traces") / "plain.csv"
    p.write_text(trace_text(), encoding="utf-8")
    return p


# ---- item 13: no secret in a message --------------------------------------------------------------------------

@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=3, max_size=10),
       password=st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=8, max_size=16),
       form=st.sampled_from(["http://{u}:{p}@127.0.0.1:9", "https://{u}:{p}@127.0.0.1:9/prom?x={p}",
                             "ftp://{u}:{p}@host:9090", "http://{u}:{p}@[::1", "http://{u}:{p}@host:abc"]))
def test_a_password_in_the_prometheus_url_is_never_shown(user, password, form):
    url = form.format(u=user, p=password)
    r = invoke("backtest", "--prometheus", url, "--query", "up", "--policies", "reactive")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert password not in r.output and "Error:" in r.output


@pytest.mark.parametrize("url, said", [
    ("ftp://x:9090", "has scheme 'ftp'"),
    ("127.0.0.1:9090", "has no http:// or https://"),
    ("prometheus", "has no http:// or https://"),
    ("http://[::1", "is not a URL (a bad port or IPv6 address)"),
    ("http://host:abc", "is not a URL (a bad port or IPv6 address)"),
])
def test_a_prometheus_url_is_checked_before_anything_runs(url, said):
    r = invoke("backtest", "--prometheus", url, "--query", "up", "--policies", "reactive")
    assert r.exit_code == 2 and said in r.output and "--prometheus" in r.output
    assert "accepted: an http:// or https:// URL with a host" in r.output
    assert "NonHttpUrlClientError" not in r.output and "query 'up'" not in r.output  # the URL is blamed


@pytest.fixture
def rejecting_prometheus():
    """A real HTTP server on 127.0.0.1 answering every query as Prometheus answers bad PromQL (HTTP 400)."""
    body = json.dumps({"status": "error", "errorType": "bad_data",
                       "error": "invalid parameter \"query\": 1:3: parse error: unexpected right parenthesis ')'"})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's names)
            data = body.encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_POST = do_GET

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()
    th.join(5)


def test_a_400_carries_prometheus_own_parse_error(rejecting_prometheus):
    r = invoke("backtest", "--prometheus", rejecting_prometheus, "--query", "up)", "--policies", "reactive")
    assert r.exit_code == 2 and "HTTP Status Code 400 (bad_data)" in r.output
    assert "Prometheus said: invalid parameter \"query\": 1:3: parse error: unexpected right parenthesis" in r.output


# ---- item 14: files read by their bytes ------------------------------------------------------------------------

def replayed(path) -> dict:
    r = invoke("backtest", str(path), *FAST, "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    return {k: doc["policies"]["reactive"][k] for k in ("underprovisioned_fraction", "missed_requests", "replica_hours")}


def test_gzip_without_gz_and_utf16_with_a_bom_replay_as_the_plain_file(plain, tmp_path):
    text = plain.read_text(encoding="utf-8")
    gz = tmp_path / "gzip-named.csv"
    gz.write_bytes(gzip.compress(text.encode()))
    u16 = tmp_path / "utf16.csv"
    u16.write_text(text, encoding="utf-16")  # Python writes the byte-order mark
    bom8 = tmp_path / "utf8-bom.csv"
    bom8.write_text(text, encoding="utf-8-sig")
    want = replayed(plain)
    assert want["replica_hours"] > 0
    for other in (gz, u16, bom8):
        assert replayed(other) == want, other.name


def test_a_latin1_file_names_its_line_and_how_to_convert(plain, tmp_path):
    lines = plain.read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3] + ",caf\xe9"  # a non-UTF-8 byte on line 4
    p = tmp_path / "latin.csv"
    p.write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    r = invoke("backtest", str(p), *FAST)
    assert r.exit_code == 2 and f"{p}: line 4 is not UTF-8 (byte 0xe9" in r.output
    assert "accepted: UTF-8 text (or UTF-16 with a byte-order mark)" in r.output and "iconv" in r.output
    assert "codec can't decode" not in r.output


def test_spreadsheet_serial_days_are_named(tmp_path):
    rows = ["timestamp,count"] + [f"{45000 + i / 1440:.6f},{100 + i % 50}" for i in range(3 * 1440)]
    p = tmp_path / "excel.csv"
    p.write_text("\n".join(rows) + "\n")
    r = invoke("backtest", str(p), *FAST)
    # 45000 - 25569 = 19431 days after 1970-01-01: 2023-03-15
    assert r.exit_code == 2 and "look like spreadsheet serial days (45000 = 2023-03-15)" in r.output
    assert "(serial - 25569) x 86400" in r.output and "does not divide" not in r.output


@pytest.mark.parametrize("name, said", [("/dev/null", "is not a regular file"), ("empty", "is empty"),
                                         ("missing.csv", "does not exist")])
def test_a_file_that_is_no_trace_says_what_it_is(tmp_path, name, said):
    path = name if name.startswith("/") else str(tmp_path / name)
    if name == "empty":
        (tmp_path / name).write_bytes(b"")
    r = invoke("backtest", path, *FAST)
    assert r.exit_code == 2 and said in r.output and "accepted" in r.output or "expected a CSV" in r.output


# ---- item 15: outputs before the run, finite numbers -------------------------------------------------------------

def test_timeseries_on_stdout_is_the_csv_alone(plain):
    r = invoke("backtest", str(plain), *FAST, "--timeseries", "-")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("timestamp,demand_qps,observed_qps,reactive_planned_qps")
    assert len(lines) == 1 + 12 * 240  # 12 h of the replay's 15-s ticks (the HPA sync): the table went to stderr
    assert TABLE in r.stderr


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pair=st.sampled_from([("--json", "--timeseries"), ("--json", "--report"), ("--timeseries", "--report")]),
       same=st.sampled_from(["same", "inside"]))
def test_two_outputs_on_one_path_are_refused_before_the_run(plain, tmp_path, pair, same):
    a, b = pair
    target = tmp_path / "out"
    second = target / "x.json" if same == "inside" and a == "--report" else target
    first = target / "x.json" if same == "inside" and b == "--report" else target
    r = invoke("backtest", str(plain), *FAST, a, str(first), b, str(second))
    assert r.exit_code == 2 and "are the same place" in r.output and TABLE not in r.output


def test_two_outputs_on_stdout_are_refused(plain):
    r = invoke("backtest", str(plain), *FAST, "--json", "-", "--timeseries", "-")
    assert r.exit_code == 2 and "--json and --timeseries both ask for standard output" in r.output


@pytest.mark.parametrize("command", [backtest_command, tune_command], ids=["backtest", "tune"])
@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_every_float_option_refuses_non_finite_values(command, value):
    floats = [p for p in command.params if isinstance(p, click.Option) and isinstance(p.type, FiniteRange)]
    plain_floats = [p.name for p in command.params if isinstance(p, click.Option) and p.type == click.FLOAT]
    assert len(floats) >= 10 and plain_floats == []  # every float option is the one finite type
    for p in floats:
        r = invoke(command.name, p.opts[0], value)
        assert r.exit_code == 2 and "is not a finite number" in r.output and p.opts[0] in r.output, p.opts[0]
