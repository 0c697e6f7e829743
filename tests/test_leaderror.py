"""The lead's forecast-error part measured from scored forecasts (``scaler.leaderror``, ``policy.window_peaks``):
worked arithmetic, and ``forecastErrorSeconds: auto`` in the spec."""

from __future__ import annotations

import numpy as np
import pytest

from forecaster.base import Forecast
from scaler.leaderror import PRIOR_MINUTES, SHIFTS, LeadError
from scaler.policy import PolicyParams, window_peaks
from scaler.spec import MetadataError, parse_metadata
from scaler.specwrite import to_metadata

T = 1_699_999_200.0  # a multiple of 3600 (so of 60): minutes and hours start here


def test_the_timing_error_is_the_smallest_shift_whose_window_covered_the_minute():
    le = LeadError(60.0)
    # window maxima at L0 + 0, 15, 30, 60, 120, 180, 300, 600 s
    le.provision(T + 600, np.array([10, 10, 12, 15, 20, 20, 20, 30.0]))
    le.observe(T + 600, 14.0)  # 15 (the 60 s shift) is the first to cover 14: d* = 60
    assert le.measured(T + 600, 0.8) == (60.0, 1)
    assert not le.pending
    # four more: covered at once (d* = 0) three times, never once (d* = 600, the bound)
    for k, y in enumerate((9.0, 10.0, 5.0, 31.0)):
        le.provision(T + 660 + 60 * k, np.array([10, 10, 12, 15, 20, 20, 20, 30.0]))
        le.observe(T + 660 + 60 * k, y)
    # d* = 0, 0, 0, 60, 600: the 0.8-quantile of the five is the 4th smallest, 60 s; the 0.5-quantile 0
    assert le.measured(T + 900, 0.8) == (60.0, 5) and le.measured(T + 900, 0.5) == (0.0, 5)
    assert le.measured(T + 900, 0.95) == (600.0, 5)
    # derived: the prior 30 s weighs as 60 scored minutes: (60 x 30 + 5 x 60) / 65 = 32.31 s
    assert le.derived(T + 900, 0.8, 30.0) == pytest.approx((PRIOR_MINUTES * 30 + 5 * 60) / (PRIOR_MINUTES + 5))
    # the window is the last 24 h: a day later nothing counts, the prior alone
    assert le.measured(T + 900 + 86400, 0.8) == (None, 0) and le.derived(T + 900 + 86400, 0.8, 30.0) == 30.0


def test_a_minute_is_provisioned_once_and_a_curve_too_short_covers_nothing():
    le = LeadError(60.0)
    assert le.wants(T + 10) and not le.wants(float("nan"))
    le.provision(T + 10, np.full(len(SHIFTS), 5.0))
    assert not le.wants(T + 50)  # the same minute: its first decision stands
    le.provision(T + 70, np.array([np.nan] * len(SHIFTS)))  # the curve ends before every window's end
    le.observe(T + 70, 1.0)
    assert le.measured(T + 70, 0.5) == (0.0, 2) and le.measured(T + 70, 0.9) == (600.0, 2)


def test_window_peaks_are_decides_peak_at_other_leads():
    # a 1-min curve, 20 req/s until 400 s from now, 80 after; q0.9 = the mean
    t = T - 600 + 60 * np.arange(60)
    mean = np.where(t - T >= 400, 80.0, 20.0)
    fc = Forecast(t, mean, {0.9: mean}, "test")
    p = PolicyParams(mode="forecastAndScale", lead_seconds=375.0, quantile=0.9, qps_per_replica=10.0)
    leads = 375.0 + np.array(SHIFTS)  # windows ending 375 .. 975 s ahead: the ramp is in those from 420 s on
    # (the curve's points are at 360 and 420 s: 375 + 30 = 405 s still ends before 420)
    assert window_peaks(20.0, fc, p, T, leads).tolist() == [20, 20, 20, 80, 80, 80, 80, 80]
    # beyond the curve's end (T + 2940 s): NaN
    assert np.isnan(window_peaks(20.0, fc, p, T, np.array([3000.0]))[0])


def md(**over) -> dict:
    m = {"serverAddress": "http://prom:9090", "query": "q", "qpsPerReplica": "10"}
    m.update(over)
    return m


def test_forecast_error_seconds_auto_reads_back_and_uses_the_default_as_its_prior():
    spec = parse_metadata(md(forecastErrorSeconds="auto"))[0]
    assert spec.lead.forecast_error_auto and spec.lead.forecast_error_seconds == 30.0
    assert spec.lead.seconds == 180 + 30 + 60 + 15 and spec.lead.ready_seconds == 180 + 60 + 15
    back = to_metadata(spec)
    assert back["forecastErrorSeconds"] == "auto" and parse_metadata(back)[0] == spec
    plain = parse_metadata(md())[0]
    assert not plain.lead.forecast_error_auto and "forecastErrorSeconds" not in to_metadata(plain)
    with pytest.raises(MetadataError, match="or auto"):
        parse_metadata(md(forecastErrorSeconds="often"))
