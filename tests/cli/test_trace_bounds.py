"""Issue 27: a trace CSV cannot make backtest build a decades-long grid or decompress without end; the error
names the row (exit 2, no traceback); and ``check`` says which metric name KEDA asks for per trigger."""

from __future__ import annotations

import gzip

from click.testing import CliRunner

from scaler.cli import main
from scaler.cli.traces import MAX_CSV_BYTES

T0 = 1_700_000_000


def rows(path, times) -> None:
    path.write_text("timestamp,qps\n" + "".join(f"{t},5\n" for t in times))


def test_a_row_in_2100_is_named_before_any_grid_is_built(tmp_path):
    p = tmp_path / "outlier.csv"
    rows(p, [T0 + 60 * i for i in range(100)] + [4_102_444_800])  # 2100-01-01, as the 102nd line
    r = CliRunner().invoke(main, ["backtest", "--no-progress", str(p)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    # (4102444800 - 1700005940) / 86400 = 27806 days from the last regular row
    assert "line 102" in r.output and "2100-01-01T00:00:00Z" in r.output and "27806 days" in r.output


def test_millisecond_timestamps_are_named_not_a_traceback(tmp_path):
    p = tmp_path / "ms.csv"
    rows(p, [1000 * (T0 + 60 * i) for i in range(100)])
    r = CliRunner().invoke(main, ["backtest", "--no-progress", str(p)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "line 2" in r.output and "milliseconds" in r.output


def test_a_gzip_bomb_stops_at_the_cap(tmp_path):
    p = tmp_path / "bomb.csv.gz"
    line = f"{T0},5\n".encode() * 100_000  # 1.3 MB that gzip shrinks ~1000x
    with gzip.open(p, "wb", compresslevel=9) as f:
        f.write(b"timestamp,qps\n")
        for _ in range(MAX_CSV_BYTES // len(line) + 2):
            f.write(line)
    assert p.stat().st_size < 2 << 20  # a small file ...
    r = CliRunner().invoke(main, ["backtest", "--no-progress", str(p)])
    assert r.exit_code == 2 and "Traceback" not in r.output  # ... refused at the cap, not read whole
    assert f"more than {MAX_CSV_BYTES >> 20} MiB" in r.output


def test_check_names_the_metric_keda_asks_for_each_trigger(tmp_path):
    p = tmp_path / "two.yaml"
    trig = ('    - type: external\n      metadata: {{scalerAddress: "forescale.forescale:6000", serverAddress: '
            '"http://prom:9090", query: "sum(rate(x[2m]))", qpsPerReplica: "10"{extra}}}\n')
    p.write_text("apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: llm, namespace: serving}\n"
                 "spec:\n  scaleTargetRef: {name: llm}\n  triggers:\n"
                 + trig.format(extra=', metricName: "fast"') + trig.format(extra=""))
    r = CliRunner().invoke(main, ["check", str(p)])
    assert r.exit_code == 0, r.output
    assert "trigger 0 (external): ok (KEDA asks for metric 's0-fast')" in r.output
    assert "trigger 1 (external): ok (KEDA asks for metric 's1-forescale-serving-llm')" in r.output
