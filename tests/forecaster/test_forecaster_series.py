"""Series hygiene, CSV and Prometheus readers: exact counts, clear errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from forecaster.base import Series
from forecaster.series import HygieneReport, fill_gaps, from_prometheus_matrix, regularize, resample
from forecaster.tracecsv import from_csv
from support.paths import TRACES

NAN, INF = math.nan, math.inf


def traces() -> Path:
    return TRACES


def test_hand_made_series_exact_report():
    # 12 slots at 60 s; slot 9 absent; 2 NaN, 1 Inf, 1 negative; one sample 2 s off the grid
    t = [0, 60, 120, 180, 240, 300, 360, 420, 482, 600, 660]
    y = [10, NAN, 12, INF, 14, -3, NAN, 17, 18, 20, 21]
    s, r = regularize(t, y, 60)
    assert r == HygieneReport(points=12, step=60.0, missing=5, interpolated=5, unfilled=0, long_gaps=0,
                              non_finite=3, negative=1, counter_resets=0, duplicates=0, off_grid=1,
                              too_short=False, message=r.message)
    np.testing.assert_allclose(s.t, np.arange(12) * 60.0)
    np.testing.assert_allclose(s.y, [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21])
    assert "5 missing" in r.message and "3 non-finite" in r.message and "1 negative" in r.message


def test_counter_with_reset_exact_rates():
    # a counter scraped every 60 s; it resets between 180 and 240 (the process restarted)
    t = [0, 60, 120, 180, 240, 300, 360]
    c = [1000, 1060, 1180, 1300, 30, 90, 150]
    s, r = regularize(t, c, 60, is_counter=True)
    assert r.counter_resets == 1 and r.missing == 0 and r.points == 6
    np.testing.assert_allclose(s.t, [60, 120, 180, 240, 300, 360])
    np.testing.assert_allclose(s.y, [1.0, 2.0, 2.0, 0.5, 1.0, 1.0])  # after the reset: 30 requests in 60 s


def test_counter_gap_spreads_the_known_increase():
    s, r = regularize([0, 60, 240, 300], [0, 60, 420, 480], 60, is_counter=True)
    np.testing.assert_allclose(s.y, [1.0, 2.0, 2.0, 2.0, 1.0])  # 360 requests over 180 s
    assert r.missing == 0


def test_long_gap_stays_nan_and_is_counted():
    t = np.arange(20) * 60.0
    y = np.arange(20, dtype=float)
    y[3:5] = NAN  # 2 points: interpolated
    y[8:16] = NAN  # 8 points: too long
    s, r = regularize(t, y, 60, max_gap=5)
    assert (r.missing, r.interpolated, r.unfilled, r.long_gaps) == (10, 2, 8, 1)
    np.testing.assert_allclose(s.y[3:5], [3.0, 4.0])
    assert np.isnan(s.y[8:16]).all()


def test_edges_are_not_interpolated():
    y, filled, unfilled, runs = fill_gaps(np.array([NAN, 1.0, NAN, 3.0, NAN]), 5)
    np.testing.assert_allclose(y, [NAN, 1.0, 2.0, 3.0, NAN])
    assert (filled, unfilled, runs) == (1, 2, 2)


def test_duplicates_and_off_grid_and_unsorted():
    s, r = regularize([120, 0, 60, 60, 185], [3, 1, 2, 9, 4], 60)
    assert r.duplicates == 1 and r.off_grid == 1
    np.testing.assert_allclose(s.y, [1, 9, 3, 4])  # the last sample of a slot wins
    np.testing.assert_allclose(s.t, [0, 60, 120, 180])


def test_too_short():
    s, r = regularize([0, 60], [1, NAN], 60)
    assert r.too_short and "too short" in r.message
    s, r = regularize([], [], 60)
    assert r.too_short and len(s) == 0


def test_resample_means():
    s = Series(np.arange(6) * 60.0, np.array([1, 3, NAN, 5, 7, 9.0]), 60.0)
    r = resample(s, 180)
    np.testing.assert_allclose(r.y, [2.0, 7.0])
    np.testing.assert_allclose(r.t, [0.0, 180.0])
    with pytest.raises(ValueError, match="integer multiple"):
        resample(s, 90)


# --- CSV ------------------------------------------------------------------------------------------

def write(tmp_path, text, name="trace.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_csv_count_iso(tmp_path):
    p = write(tmp_path, "timestamp,count\n2024-01-01T00:00:00,60\n2024-01-01T00:01:00,120\n"
                        "2024-01-01T00:02:00,\n2024-01-01T00:03:00,30\n")
    s, r = from_csv(p)
    assert s.step == 60.0 and s.t[0] == 1704067200.0
    np.testing.assert_allclose(s.y, [1.0, 2.0, 1.25, 0.5])  # the empty value is a gap, interpolated
    assert r.non_finite == 1 and r.interpolated == 1


def test_csv_qps_epoch_and_step(tmp_path):
    rows = "\n".join(f"{1700000000 + 60 * i},{i}" for i in range(10))
    s, r = from_csv(write(tmp_path, "timestamp,qps\n" + rows + "\n"), step=300)
    assert s.step == 300.0
    np.testing.assert_allclose(s.y, [2.0, 7.0])


def test_csv_timezone_offset(tmp_path):
    s, _ = from_csv(write(tmp_path, "timestamp,qps\n2024-01-01T02:00:00+02:00,1\n2024-01-01T00:01:00Z,2\n"))
    np.testing.assert_allclose(s.t, [1704067200.0, 1704067260.0])


@pytest.mark.parametrize("text, match", [
    ("", "empty file"),
    ("2024-01-01T00:00:00,5\n2024-01-01T00:01:00,6\n", "no 'timestamp' column.*add a header"),
    ("time,count\n1,2\n3,4\n", "no 'timestamp' column"),
    ("timestamp,requests\n1,2\n3,4\n", "neither 'count' nor 'qps'"),
    ("timestamp,count,qps\n1,2,3\n4,5,6\n", "both 'count' and 'qps'"),
    ("timestamp,count\n2024-01-01T00:00:00,5\n", "1 data row"),
    ("timestamp,count\n2024-01-01T00:00:00,5\nyesterday,6\n", "line 3: column 'timestamp': 'yesterday'"),
    ("timestamp,count\n2024-01-01T00:00:00,5\n2024-01-01T00:01:00,lots\n", "line 3: column 'count': 'lots'"),
    ("timestamp,count\n2024-01-01T00:00:00,5\n2024-01-01T00:01:00\n", "line 3: 1 field"),
])
def test_csv_bad_input_names_file_line_and_form(tmp_path, text, match):
    p = write(tmp_path, text)
    with pytest.raises(ValueError, match=match) as e:
        from_csv(p)
    msg = str(e.value)
    assert str(p) in msg and "timestamp,count" in msg and "timestamp,qps" in msg


def test_csv_missing_file(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        from_csv(tmp_path / "nope.csv")


def test_csv_finer_step_refused(tmp_path):
    p = write(tmp_path, "timestamp,qps\n0,1\n60,2\n120,3\n")
    with pytest.raises(ValueError, match="finer than"):
        from_csv(p, step=30)


@pytest.mark.skipif(not traces().exists(), reason="shared traces not present")
def test_real_traces_load():
    s, r = from_csv(traces() / "servegen_m-small/per_10min.csv")  # extra columns ignored, 37 empty counts
    assert (s.step, r.points, r.non_finite, r.missing, r.interpolated, r.unfilled) == (600.0, 2016, 37, 37, 30, 7)
    s, r = from_csv(traces() / "nab_nyc_taxi/per_30min.csv")
    assert s.step == 1800.0 and r.clean and len(s) == 10320
    assert s.y[0] == pytest.approx(10844 / 1800)


# --- Prometheus -----------------------------------------------------------------------------------

def test_prometheus_matrix():
    result = [{"metric": {"job": "x"}, "values": [[1700000000, "1.5"], [1700000060, "NaN"], [1700000120, "+Inf"],
                                                  [1700000180, "4"], [1700000300, "-1"], [1700000360, "6"]]}]
    s, r = from_prometheus_matrix(result, 60)
    assert (r.points, r.non_finite, r.negative, r.missing, r.interpolated) == (7, 2, 1, 4, 4)
    np.testing.assert_allclose(s.y, [1.5, 2.33333333, 3.16666667, 4.0, 4.66666667, 5.33333333, 6.0])


@pytest.mark.parametrize("result, match", [
    ([], "returned 0 series, exactly 1"),
    ([{"values": []}, {"values": []}], "returned 2 series"),
    ([{"value": [1, "2"]}], "no 'values'"),
    ([{"values": [[1, "x"]]}], "malformed sample"),
])
def test_prometheus_errors(result, match):
    with pytest.raises(ValueError, match=match):
        from_prometheus_matrix(result, 60)
