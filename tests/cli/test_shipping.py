"""What a new user meets first: --version, `forescale check`, outputs checked before the run, `--json -`,
traces too short or too fine, the per-tick CSV, and the interactive report in a real headless Chromium."""

from __future__ import annotations

import csv
import json
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from scaler.cli import main
from scaler.spec import parse_metadata
from support.browser import chromium, console_errors, wait_for
from support.traces import T0, write_daily

REPO = Path(__file__).resolve().parents[2]
FAST = ["--model", "seasonal_naive", "--span", "12h", "--history", "1d", "--refit", "2h", "--qps-per-replica", "10",
        "--cold-start", "120", "--no-progress"]


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_version_comes_from_package_metadata():
    r = invoke("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"forescale, version {metadata.version('forescale')}"


# --------------------------------------------------------------------------
# forescale check


BAD = """\
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: llm, namespace: serving}
spec:
  scaleTargetRef: {name: llm}
  minReplicaCount: 5
  maxReplicaCount: 2
  triggers:
    - type: cpu
      metricType: Utilization
      metadata: {value: "50"}
    - type: external
      metadata:
        scalerAddress: forescale.forescale.svc:6000
        serverAddress: ftp://prometheus:9090
        query: sum(rate(x[2m]))
        qpsPerReplica: 4
        quantile: "1.5"
        history: "two weeks"
        colour: blue
"""


def test_check_accepts_the_shipped_example():
    r = invoke("check", str(REPO / "deploy" / "example" / "scaledobject.yaml"))
    assert r.exit_code == 0, r.output
    assert "ScaledObject inference/llm-inference: trigger 0 (external): ok" in r.stdout


def test_check_reports_every_bad_key_keda_style(tmp_path):
    f = tmp_path / "so.yaml"
    f.write_text(BAD)
    r = invoke("check", str(f))
    assert r.exit_code == 2 and "Traceback" not in r.output
    err = r.stderr
    where = f"{f}: ScaledObject serving/llm: trigger 1 (external): error parsing forescale metadata: "
    # unquoted in YAML: KEDA's schema wants strings (scaler.kedacheck, before the scaler's parser)
    assert (f"{f}: ScaledObject serving/llm: got 4 (a whole number); accepted: a string (KEDA's trigger metadata is "
            f"map[string]string: quote numbers and booleans) -- document 1, spec.triggers[1].metadata.qpsPerReplica"
            in err)
    assert f"{where}metadata key 'serverAddress': got 'ftp://prometheus:9090'; accepted: an http:// or https://" in err
    assert f"{where}metadata key 'quantile': got '1.5'; accepted: a number strictly between 0 and 1" in err
    assert f"{where}metadata key 'history': got 'two weeks'" in err
    assert "warning: metadata key 'colour': unknown to forescale, ignored" in err
    assert "5 is greater than maxReplicaCount 2" in err and "-- document 1, spec.minReplicaCount" in err
    assert "trigger 0" not in err  # the cpu trigger is KEDA's, not ours
    # the same trigger with the values fixed passes, through the same parser the server runs
    fixed = yaml.safe_load(BAD)
    md = fixed["spec"]["triggers"][1]["metadata"]
    md.update(serverAddress="http://prometheus:9090", qpsPerReplica="4", quantile="0.9", history="14d")
    del md["colour"]
    fixed["spec"]["minReplicaCount"] = 1
    f.write_text(yaml.safe_dump(fixed))
    r = invoke("check", str(f))
    assert r.exit_code == 0 and r.stderr == "", r.output
    parse_metadata(md)


def test_check_warns_when_holidays_have_too_short_a_history(tmp_path):
    # holidays learn from the earlier holidays of the history (the similar-day rule): the default 14d rarely holds
    # one, so check warns (exit 0: the server accepts it) until history is at least keys.HOLIDAY_HISTORY (60d)
    so = yaml.safe_load((REPO / "deploy" / "example" / "scaledobject.yaml").read_text())
    md = next(t["metadata"] for t in so["spec"]["triggers"] if t["type"] == "external")
    md.pop("history", None)
    md["holidays"] = "US"
    f = tmp_path / "so.yaml"
    f.write_text(yaml.safe_dump(so))
    r = invoke("check", str(f))
    assert r.exit_code == 0, r.output
    assert "warning: metadata key 'history': the default with holidays 'US' rarely holds an earlier holiday" in r.stderr
    assert "give it history 60d or more" in r.stderr
    md["history"] = "60d"
    f.write_text(yaml.safe_dump(so))
    r = invoke("check", str(f))
    assert r.exit_code == 0 and "warning" not in r.stderr, r.output


def test_check_refuses_unreadable_input_without_traceback(tmp_path):
    (tmp_path / "broken.yaml").write_text("kind: ScaledObject\n  metadata: [\n")
    r = invoke("check", str(tmp_path / "broken.yaml"))
    assert r.exit_code == 2 and "not valid YAML" in r.stderr and "Traceback" not in r.output
    r = invoke("check", str(tmp_path / "missing.yaml"))
    assert r.exit_code == 2 and "cannot read" in r.stderr
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    r = invoke("check", str(tmp_path / "cm.yaml"))
    assert r.exit_code == 2 and "no external trigger of a keda.sh ScaledObject" in r.stderr


# --------------------------------------------------------------------------
# errors before the run, stdout JSON, trace length and resolution


def test_unwritable_outputs_fail_before_the_run(tmp_path):
    trace = write_daily(tmp_path / "t.csv", days=2.0)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for flag, target in (("--json", blocker / "r.json"), ("--report", blocker / "rep"),
                         ("--timeseries", blocker / "ts.csv"), ("--report", blocker), ("--json", tmp_path)):
        t = time.perf_counter()
        r = invoke("backtest", str(trace), *FAST, flag, str(target))
        assert r.exit_code == 2, (flag, r.output)
        # ours ("Error: --json PATH: cannot write there ...") or click's for an existing path of the wrong kind
        assert flag in r.stderr and str(target) in r.stderr and "Traceback" not in r.output
        assert "missed" not in r.stdout and time.perf_counter() - t < 5  # nothing was simulated
    r = invoke("tune", str(trace), *FAST, "--report", str(blocker / "rep"))
    assert r.exit_code == 2 and "--report" in r.stderr


def test_json_dash_is_stdout_and_the_table_goes_to_stderr(tmp_path):
    trace = write_daily(tmp_path / "t.csv", days=2.0)
    r = invoke("backtest", str(trace), *FAST, "--policies", "reactive,oracle", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # stdout is the document alone
    assert set(doc["policies"]) == {"reactive", "oracle"}
    assert "reactive" in r.stderr and "missed" in r.stderr
    assert not (tmp_path / "-").exists() and not Path("-").exists()


def test_too_short_trace_is_refused_naming_the_numbers(tmp_path):
    f = tmp_path / "three.csv"
    f.write_text("timestamp,qps\n1700000000,1\n1700000060,2\n1700000120,3\n")
    r = invoke("backtest", str(f), "--no-progress")
    assert r.exit_code == 2 and "Traceback" not in r.output
    # needs 30 points x 60 s of history + L (180 + 30 + 60 + 15 = 285 s) + 3600 s simulated = 5685 s
    assert "the trace covers 180 s (3 points at 60 s); a replay needs at least 5685 s" in r.stderr
    assert "history (1800 s) + the lead L (285 s) + 3600 s simulated" in r.stderr


def test_one_second_csv_is_resampled_to_the_step(tmp_path):
    # 1 s rows: 2 days -> 172,800 rows; forecast at 60 s as the server does (step), not at 1 s
    t = T0 + np.arange(2 * 86400)
    qps = np.where((t // 60) % 2 == 0, 10.0, 30.0)  # alternate minutes: each 60 s mean is 10 or 30
    f = tmp_path / "fine.csv"
    with open(f, "w") as fh:
        fh.write("timestamp,qps\n")
        fh.writelines(f"{a},{b:g}\n" for a, b in zip(t, qps))
    out = tmp_path / "r.json"
    r = invoke("backtest", str(f), *FAST, "--policies", "reactive,linear_trend,oracle", "--json", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["trace"]["step_seconds"] == 60 and doc["trace"]["points"] == 2 * 1440
    assert "resampled from 1 s to 60 s" in doc["trace"]["hygiene"]
    r = invoke("backtest", str(f), *FAST, "--policies", "reactive,oracle", "--step", "5m", "--json", str(out))
    assert r.exit_code == 0 and json.loads(out.read_text())["trace"]["step_seconds"] == 300
    r = invoke("backtest", str(f), *FAST, "--step", "90s")
    assert r.exit_code == 0 or "does not divide" not in r.stderr  # 90 is a multiple of 1 s: fine
    coarse = write_daily(tmp_path / "coarse.csv", days=2.0, step=120)
    r = invoke("backtest", str(coarse), *FAST, "--policies", "reactive,oracle", "--step", "90s")
    assert r.exit_code == 0, r.output  # a coarser file keeps its own interval


# --------------------------------------------------------------------------
# the per-tick CSV and the interactive report, in a real browser


@pytest.fixture(scope="module")
def browser():
    with chromium() as driver:
        yield driver


def _check_page(driver, index: Path, n_charts: int) -> None:
    driver.get(index.as_uri())
    wait_for(driver, f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {n_charts}",
             what=f"{n_charts} rendered plotly charts")
    ids = driver.execute_script("return Array.from(document.querySelectorAll('.js-plotly-plot')).map(e => e.id);")
    assert {"chart-capacity", "chart-misses", "chart-frontier"} <= set(ids), ids
    # the capacity chart: demand + one line per policy, with the range slider for zooming
    n = driver.execute_script("return document.getElementById('chart-capacity').data.length;")
    assert n >= 3
    assert driver.execute_script("return !!document.querySelector('#chart-capacity .rangeslider-container');")
    # zoom: relayout to a 1-hour window; the axis follows
    driver.execute_script("const d = document.getElementById('chart-capacity');"
                          "const x = d.data[0].x; Plotly.relayout(d, {'xaxis.range': [x[100], x[340]]});")
    rng = wait_for(driver, "document.getElementById('chart-capacity').layout.xaxis.range", what="zoomed range")
    assert len(rng) == 2
    # hover details on the frontier
    texts = driver.execute_script("return document.getElementById('chart-frontier').data.map(t => t.hovertext || t.text);")
    assert any(t and "x oracle" in str(t) for t in texts)
    assert not driver.execute_script("return Array.from(document.scripts).some(s => s.src);")  # nothing external
    assert driver.execute_script("return performance.getEntriesByType('resource')"
                                 ".filter(e => !e.name.startsWith('file:') && !e.name.startsWith('data:')).length;") == 0
    assert console_errors(driver) == []


def test_timeseries_csv_and_interactive_report(tmp_path, browser):
    trace = write_daily(tmp_path / "t.csv", days=2.0)
    out, rep, ts = tmp_path / "r.json", tmp_path / "rep", tmp_path / "ticks.csv"
    r = invoke("backtest", str(trace), *FAST, "--policies", "reactive,predictive,oracle", "--json", str(out),
               "--report", str(rep), "--timeseries", str(ts))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    with open(ts) as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:3] == ["timestamp", "demand_qps", "observed_qps"]
    assert {"reactive_planned_qps", "reactive_ready", "reactive_starting", "reactive_missed_qps",
            "oracle_ready"} <= set(rows[0])
    assert len(rows) == 12 * 3600 / 15  # 12 h of 15 s ticks
    qpr = doc["settings"]["qps_per_replica"]
    for name in ("reactive", "predictive", "oracle"):
        demand = np.array([float(x["demand_qps"]) for x in rows])
        ready = np.array([float(x[f"{name}_ready"]) for x in rows])
        missed = np.array([float(x[f"{name}_missed_qps"]) for x in rows])
        assert np.allclose(missed, np.maximum(demand - ready * qpr, 0), atol=1e-3)
        # the JSON's aggregate is the sum of the per-tick series (6 significant digits in the CSV)
        assert missed.sum() / demand.sum() == pytest.approx(doc["policies"][name]["underprovisioned_fraction"],
                                                           rel=1e-4, abs=1e-7)
    page = (rep / "index.html").read_text()
    assert "<h1>forescale backtest</h1>" in page and "<script src" not in page  # plotly.js is inlined
    for png in ("capacity.png", "capacity_zoom.png", "forecast.png", "frontier.png"):
        assert (rep / png).read_bytes()[:4] == b"\x89PNG"  # the PNGs stay, for terminals
    _check_page(browser, rep / "index.html", 4)


def test_tune_report_shows_the_yaml_it_selected(tmp_path, browser):
    trace = write_daily(tmp_path / "t.csv", days=2.0)
    rep = tmp_path / "rep"
    r = invoke("tune", str(trace), *FAST, "--jobs", "1", "--report", str(rep))
    assert r.exit_code == 0, r.output
    page = (rep / "index.html").read_text()
    assert "<h1>forescale tune</h1>" in page and "forescale backtest</h1>" not in page
    _check_page(browser, rep / "index.html", 4)
    shown = browser.find_element("id", "metadata-yaml").text
    block = yaml.safe_load(shown)
    printed = r.stdout[r.stdout.index("# forescale tune"):].split("\n\n")[0].split("\nwrote ")[0]
    assert block == yaml.safe_load(printed)
    parse_metadata(block["spec"]["triggers"][0]["metadata"])  # tune prints a whole ScaledObject
    assert browser.execute_script("return document.getElementById('chart-frontier').data"
                                  ".some(t => t.name === 'chosen');")
