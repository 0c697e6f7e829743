"""``backtest`` and ``tune --capacity-model FILE``: the model a loadtest grid wrote, through the replay's one binding
load; the bad files and the options it replaces."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from scaler.cli import main
from support.capacityfiles import azure_model_file

BUNDLED = Path(__file__).resolve().parents[2] / "scaler" / "data" / "azure_llm_code" / "per_10s.csv"
ARGS = ["--span", "45m", "--history", "10m", "--step", "10s", "--cold-start", "60", "--refit", "15m",
        "--policies", "reactive", "--no-progress"]


def invoke(*args: str):
    return CliRunner().invoke(main, [*args], catch_exceptions=False)


model_file = azure_model_file  # Q' 2 req/s, T' 100 tokens/s at w 0.02 (margin 0.2 of 2.5 and 125)


def backtest(tmp_path, lengths: tuple[float, float]):
    """The bundled trace replayed on a model measured on ``lengths``: (the run, its JSON)."""
    out = tmp_path / "r.json"
    r = invoke("backtest", str(BUNDLED), *ARGS, "--capacity-model", str(model_file(tmp_path, lengths)),
               "--json", str(out))
    assert r.exit_code == 0, r.output
    return r, json.loads(out.read_text())


def test_a_model_wider_than_the_trace_replays_as_its_token_budget(tmp_path):
    # lengths 1 .. 1e6 weighted tokens per request hold every interval of the trace, and the ceiling in force (2)
    # is the target: the replay is test_backtest_tokens.py's binding run, to the figure (reactive, deterministic)
    r, doc = backtest(tmp_path, (1.0, 1e6))
    assert doc["settings"]["qps_per_replica"] == pytest.approx(2.0)
    tok = doc["settings"]["tokens"]
    assert (tok["tokens_per_replica"], tok["input_token_weight"], tok["requests_per_replica"]) == pytest.approx(
        (100.0, 0.02, 2.0))
    assert doc["policies"]["reactive"]["underprovisioned_fraction"] == pytest.approx(0.27022, abs=5e-5)
    assert any("left the lengths it was measured on (1-1e+06 weighted tokens per request) in 0.0 %" in n
               for n in doc["notes"])
    assert "capacity model" in r.output and "azure-code-llm on 1x test GPU" in r.output


def test_a_mix_outside_the_measured_lengths_is_clamped_and_said(tmp_path):
    # the code trace's 10 s intervals hold 36.7 to 100.8 weighted tokens per request (0.02 x prompt + answer; the
    # median 67.7): a model measured on 50 .. 80 holds 15 heavier intervals at 80 and 3 lighter at 50, of the 106
    # with requests among the 270 simulated: 18 / 270 = 6.7 %
    _, doc = backtest(tmp_path, (50.0, 80.0))
    (note,) = [n for n in doc["notes"] if "left the lengths it was measured on (50-80" in n]
    assert "in 6.7 % of the simulated intervals: held to the nearest measured length" in note
    assert doc["settings"]["tokens"]["lengths"] == [50.0, 80.0]


@pytest.mark.parametrize("extra, needle", [
    (["--qps-per-replica", "3"], "accepted is the file or --qps-per-replica, not both"),
    (["--tokens-per-replica", "100"], "accepted is the file or --tokens-per-replica, not both"),
    (["--served-model", "mistral-7b"], "measured on model 'azure-code-llm' (1x test GPU), not on 'mistral-7b'"),
])
def test_a_model_and_the_figures_it_sets_are_one_or_the_other(tmp_path, extra, needle):
    r = invoke("backtest", str(BUNDLED), *ARGS, "--capacity-model", str(model_file(tmp_path, (1.0, 1e6))), *extra)
    assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output


def test_a_bad_capacity_file_is_refused_before_the_replay(tmp_path):
    bad = tmp_path / "bad.json"
    doc = json.loads(model_file(tmp_path, (1.0, 1e6)).read_text())
    doc["fit"]["tokens_per_second"] = -1
    bad.write_text(json.dumps(doc))
    r = invoke("backtest", str(BUNDLED), *ARGS, "--capacity-model", str(bad))
    assert r.exit_code == 2 and f"--capacity-model {bad}: fit: tokens_per_second is -1" in r.output
    lt = tmp_path / "loadtest.json"
    lt.write_text(json.dumps({"schema": "forescale.loadtest/v1"}))
    r = invoke("backtest", str(BUNDLED), *ARGS, "--capacity-model", str(lt))
    assert r.exit_code == 2 and "schema 'forescale.loadtest/v1', expected 'forescale.capacity/v1'" in r.output
    r = invoke("backtest", str(BUNDLED), *ARGS, "--served-model", "x")
    assert r.exit_code == 2 and "--served-model goes with --capacity-model" in r.output


def test_tune_reads_the_model_too(tmp_path):
    # three days of 5-minute counts with token sums: 1,000 prompt tokens a request, 100 answer tokens (200 from
    # 09:00 to 12:00): 0.02 x 1000 + 100 = 120 weighted tokens a request (220 in those hours), so at Q' = 2 req/s and
    # T' = 100 tokens/s a replica serves 100 / 120 = 0.83 requests/s: the tokens bind everywhere
    rows = ["timestamp,count,input_tokens,output_tokens"]
    for k in range(3 * 288):
        n = round(300 * (5 + 4 * math.sin(2 * math.pi * (k % 288) / 288)))
        rows.append(f"{1_700_000_000 + 300 * k},{n},{n * 1000},{n * (200 if (k // 12) % 24 in (9, 10, 11) else 100)}")
    trace = tmp_path / "t.csv"
    trace.write_text("\n".join(rows) + "\n")
    out = tmp_path / "tune.json"
    r = invoke("tune", str(trace), "--span", "1d", "--history", "2d", "--step", "5m", "--cold-start", "60",
               "--model", "naive", "--capacity-model", str(model_file(tmp_path, (1.0, 1e6))), "--no-progress",
               "--json", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["settings"]["qps_per_replica"] == pytest.approx(2.0)
    assert any("the tokens bind in 100.0 %" in n for n in doc["notes"])
    assert 'qpsPerReplica: "2"' in r.output
    # the trigger printed reads the same model: the file as mounted under --capacity-dir, vLLM's token counters
    assert 'capacityModel: "/etc/forescale/azure-code-llm.json"  # mount azure-code-llm.json there' in r.output
    assert 'inputTokenQuery: "sum(rate(vllm:prompt_tokens_total[2m]))"  # replace: your prompt tokens/s' in r.output


def test_a_scaledobject_trigger_on_a_capacity_model_is_refused_not_replayed_on_requests_alone():
    from scaler.replay.manifest import plans
    from scaler.replay.manifestfields import ManifestError

    doc = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "t"},
           "spec": {"scaleTargetRef": {"name": "d"}, "triggers": [{"type": "external", "metadata": {
               "scalerAddress": "forescale:9090", "serverAddress": "http://p:9090", "query": "q", "qpsPerReplica": "2",
               "capacityModel": "/etc/forescale/c.json", "inputTokenQuery": "i", "outputTokenQuery": "o"}}]}}
    with pytest.raises(ManifestError, match=r"capacityModel: a trigger on a capacity model is not replayed"):
        plans([("test", doc)])
