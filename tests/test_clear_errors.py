"""Inputs that gave a traceback give a clear error naming what is accepted (issue 36 item 12): a trigger named by a
number or a list (``check``), a target that is 0 as a milli-quantity (``backtest``), a Prometheus scalar result."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from scaler.cli import main
from scaler.deadband import MIN_TARGET, to_milli
from scaler.prom import PrometheusClient, PrometheusTarget, PromError, PromErrorKind
from support.manifests import as_yaml, scaled_object
from support.traces import write_daily

@pytest.mark.parametrize("name, got", [("5", "got 5 (a whole number)"), ("[a, b]", "got a list"),
                                        ("{a: 1}", "got a mapping"), ("true", "got true (a boolean)")])
def test_check_names_a_trigger_name_that_is_not_a_string(tmp_path, name, got):
    f = tmp_path / "so.yaml"
    f.write_text(as_yaml(scaled_object(trigger_name="NAME")).replace("name: NAME", f"name: {name}"))
    r = CliRunner().invoke(main, ["check", str(f)], catch_exceptions=False)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"ScaledObject serving/llm: {got}; accepted: a string -- document 1, spec.triggers[0].name" in r.stderr
    # the forescale trigger itself is still checked, and its label does not trip over the name
    assert "trigger 0 (external): ok" in r.stdout


@pytest.mark.parametrize("qps", ["0.0000001", "0.0004"])
def test_backtest_refuses_a_target_that_is_0_as_a_milli_quantity(tmp_path, qps):
    # KEDA hands the HPA its target in thousandths: 0.0004 req/s is "0.000", a target the HPA refuses
    assert to_milli(float(qps)) == 0 and to_milli(MIN_TARGET) == 1
    csv = write_daily(tmp_path / "daily.csv", 1.5)
    r = CliRunner().invoke(main, ["backtest", str(csv), "--model", "naive", "--span", "6h", "--history", "1d",
                                  "--no-progress", "--qps-per-replica", qps], catch_exceptions=False)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert (f"qpsPerReplica {float(qps):g}: below 0.001 req/s the HPA target is 0 (KEDA hands it over in "
            f"thousandths); accepted: >= 0.001 (--qps-per-replica); it was given") in r.output


def test_backtest_says_so_when_the_derived_target_is_0_too(tmp_path):
    # rates of ~1e-5 req/s (a trace in another unit?): the derived qpsPerReplica, peak / 20, is below 0.001
    csv = tmp_path / "tiny.csv"
    with csv.open("w") as fh:
        fh.write("timestamp,qps\n")
        fh.writelines(f"{1_700_006_400 + 60 * i},{1e-5 * (1 + i % 7)}\n" for i in range(int(1.5 * 1440)))
    r = CliRunner().invoke(main, ["backtest", str(csv), "--model", "naive", "--span", "6h", "--history", "1d",
                                  "--no-progress"], catch_exceptions=False)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "below 0.001 req/s the HPA target is 0" in r.output
    assert "it was derived: the simulated peak 7e-05 req/s / 20 replicas, rounded (--qps-per-replica" in r.output


def test_a_prometheus_scalar_result_is_a_clear_error_not_an_attribute_error(prometheus):
    client = PrometheusClient(PrometheusTarget(prometheus.url))
    assert client.scalar("sum(rate(forescale_flat_requests_total[2m]))", prometheus.end_at) == pytest.approx(5.0)
    for query in ("scalar(sum(rate(forescale_flat_requests_total[2m])))", "time()", "1"):
        with pytest.raises(PromError) as e:
            client.scalar(query, prometheus.end_at)
        assert e.value.kind is PromErrorKind.BAD_VALUE
        assert str(e.value).startswith("the query's result is a scalar, not an instant vector; accepted: a query "
                                       "whose result is one series, e.g. sum(rate(x[2m])) (drop scalar() or wrap "
                                       "it: vector(...))")
    # a range query of a scalar is a matrix in Prometheus: that is a series, and it is read as one
    series, _ = client.range_series("scalar(sum(rate(forescale_flat_requests_total[2m])))",
                                    prometheus.end_at - 3600, prometheus.end_at, 60)
    assert series.y[-1] == pytest.approx(5.0)
