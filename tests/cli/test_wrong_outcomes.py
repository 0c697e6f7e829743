"""Issue 24 item 6: inputs that once gave a wrong outcome (a traceback after the run, a silent collapse, a
scenario that passed trivially or was dropped) are clear errors before the run: exit 2, naming the input and
what is accepted."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from scaler.cli import main

FAST = ["--model", "seasonal_naive", "--span", "12h", "--history", "1d", "--refit", "2h", "--qps-per-replica", "10",
        "--cold-start", "120", "--no-progress"]


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def counting_server():
    """A real HTTP server on 127.0.0.1 that counts the requests it gets: a loadtest that started would hit it."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's names)
            hits.append(self.path)
            self.send_response(500)
            self.end_headers()

        do_GET = do_POST

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", hits
    srv.shutdown()
    srv.server_close()
    th.join(5)


def test_loadtest_plot_with_a_non_image_suffix_exits_2_before_the_run(tmp_path, counting_server):
    url, hits = counting_server
    r = invoke("loadtest", url, "--rates", "1", "--duration", "2s", "--plot", str(tmp_path / "out.txt"))
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"--plot {tmp_path / 'out.txt'}" in r.stderr and "'.txt'" in r.stderr
    assert "accepted: a file ending in .png, .svg, .pdf" in r.stderr
    assert hits == [] and not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize("flag, name", [("--json", "r.json"), ("--plot", "latency.png")])
def test_loadtest_outputs_into_an_unwritable_path_exit_2_before_the_run(tmp_path, counting_server, flag, name):
    url, hits = counting_server
    blocker = tmp_path / "a-file"
    blocker.write_text("x")  # a file where a directory would have to be: nothing can be written under it
    target = blocker / name
    r = invoke("loadtest", url, "--rates", "1", "--duration", "2s", flag, str(target))
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"{flag} {target}: cannot write there" in r.stderr and "nothing was run" in r.stderr
    assert hits == []  # no request was sent: the check came before the run


MULTI = """timestamp,model,count
2024-01-01T00:00:00Z,llama,5
2024-01-01T00:00:00Z,mistral,7
2024-01-01T00:01:00Z,llama,6
2024-01-01T00:01:00Z,mistral,8
"""


@pytest.mark.parametrize("verb", ["backtest", "tune"])
def test_a_multi_series_csv_without_series_column_is_refused(tmp_path, verb):
    f = tmp_path / "fleet.csv"
    f.write_text(MULTI)
    r = invoke(verb, str(f), "--no-progress")
    assert r.exit_code == 2 and "Traceback" not in r.output
    err = r.stderr
    assert f"{f}: line 3 repeats the timestamp of line 2" in err
    assert "'model' look like series labels" in err and "--series-column COLUMN" in err


def test_node_loss_without_a_node_pool_is_refused(tmp_path):
    r = invoke("backtest", "--flat-load", "10", *FAST, "--scenario", "node-loss:at=1h")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "--scenario node-loss:at=1h need(s) a node pool: add --gpus-per-node N" in r.stderr


def test_a_scenario_after_the_simulated_span_is_refused():
    # --span 12h: at=13h would never happen in the replay
    r = invoke("backtest", "--flat-load", "10", *FAST, "--scenario", "step:from=1,to=2,at=13h")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "scenario 'step:from=1,to=2,at=13h': at=13h is not within the simulated span of 12h" in r.stderr
    assert "accepted: at from 0 to less than the span (--span)" in r.stderr
    # the end of the span itself is outside it too
    r = invoke("backtest", "--flat-load", "10", *FAST, "--scenario", "pod-kill:at=12h")
    assert r.exit_code == 2 and "at=12h is not within the simulated span of 12h" in r.stderr


def test_a_duplicate_scenario_key_is_refused():
    r = invoke("backtest", "--flat-load", "10", *FAST, "--scenario", "step:from=1,to=2,at=1h,at=2h")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "scenario 'step:from=1,to=2,at=1h,at=2h': key 'at' given twice; accepted: each key once" in r.stderr
