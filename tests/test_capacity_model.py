"""``scaler.capacity``: the capacity model's contract (monotone in the lengths, within its stated error of the
points it was fitted on), its translation into the binding load, and every bad file, worked by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scaler.capacity import (SCHEMA, CapacityModelError, Point, document, fit, loads, model_of, read)
from scaler.tokens import TokenCapacity

GRID_I, GRID_O = (128.0, 1024.0, 4096.0), (64.0, 256.0)


def roofline(q: float, t: float, w: float, noise: tuple[float, ...] = ()) -> list[Point]:
    pts = [Point(i, o, min(q, t / (w * i + o))) for i in GRID_I for o in GRID_O]
    if noise:
        pts = [Point(p.input_tokens, p.output_tokens, p.capacity_rps * (1 + e)) for p, e in zip(pts, noise)]
    return pts


def test_the_fit_recovers_a_roofline_exactly():
    # Q = 12 req/s, T = 3000 weighted tokens/s, w = 0.05: the knees are min(12, 3000 / (0.05 i + o)):
    #   (128, 64): 3000 / 70.4 = 42.6 -> 12 (request-bound); (4096, 256): 3000 / 460.8 = 6.51 (token-bound)
    pts = roofline(12.0, 3000.0, 0.05)
    assert pts[0].capacity_rps == 12.0 and pts[-1].capacity_rps == pytest.approx(6.5104, abs=1e-4)
    f = fit(pts)
    assert f.requests_per_second == pytest.approx(12.0, rel=1e-6)
    assert f.tokens_per_second == pytest.approx(3000.0, rel=1e-3)
    assert f.input_weight == pytest.approx(0.05, rel=1e-2)
    assert f.max_error < 1e-3


def test_with_no_request_bound_point_the_ceiling_is_the_capacity_at_the_shortest_length():
    # Q = 1000 never binds here: T = 600, w = 0.1: (128, 64): 600 / 76.8 = 7.8125 is the highest knee
    f = fit(roofline(1000.0, 600.0, 0.1))
    assert f.requests_per_second == pytest.approx(600.0 / 76.8, rel=1e-3)
    assert f.max_error < 1e-3


def test_the_model_matches_the_points_it_was_fitted_on_within_its_stated_error():
    # +-8 % noise on the knees: the fit error is the largest |model / knee - 1| over the six points, and no point
    # lies outside it (the contract the file states)
    pts = roofline(12.0, 3000.0, 0.05, noise=(0.08, -0.05, 0.03, -0.08, 0.06, -0.02))
    m = model_of(pts, model="m", hardware="h", margin=0.0)
    got, clamped = m.capacity_rps([p.input_tokens for p in pts], [p.output_tokens for p in pts])
    errors = np.abs(got / [p.capacity_rps for p in pts] - 1.0)
    assert not clamped.any()
    assert errors.max() == pytest.approx(m.fit.max_error, rel=1e-9) and (errors <= m.fit.max_error + 1e-12).all()
    assert 0.0 < m.fit.max_error < 0.15  # the noise is 8 %; the least-squares fit spreads it, never far beyond


@settings(max_examples=60, deadline=None)
@given(st.floats(1, 1e3), st.floats(10, 1e5), st.floats(0, 10), st.lists(st.floats(-0.2, 0.2), min_size=6,
                                                                           max_size=6),
       st.floats(0, 2e4), st.floats(0, 2e4), st.floats(0, 5e3), st.floats(0, 5e3))
def test_capacity_never_rises_with_either_length(q, t, w, noise, i1, i2, o1, o2):
    m = model_of(roofline(q, t, w, tuple(noise)), model="m", hardware="h", margin=0.2)
    assert m.fit.input_weight >= 0 and m.fit.requests_per_second > 0 and m.fit.tokens_per_second > 0
    lo_i, hi_i, lo_o, hi_o = min(i1, i2), max(i1, i2), min(o1, o2), max(o1, o2)
    caps = [float(m.capacity_rps(i, o)[0]) for i, o in ((lo_i, lo_o), (hi_i, lo_o), (lo_i, hi_o), (hi_i, hi_o))]
    assert caps[1] <= caps[0] + 1e-12 and caps[2] <= caps[0] + 1e-12
    assert caps[3] <= min(caps[1], caps[2]) + 1e-12


def test_a_shape_outside_the_grid_is_clamped_and_said():
    # Q 12, T 3000, w 0.05, the weighted lengths measured: 0.05 x 128 + 64 = 70.4 .. 0.05 x 4096 + 256 = 460.8.
    # A mean prompt of 32,000 tokens and 1,000 out is 2,600 weighted tokens: held at 460.8, capacity 3000/460.8
    # = 6.51 (not the 1.15 an extrapolation would claim); 10 in, 5 out (5.5) is held at 70.4: the ceiling, 12;
    # 2048 in, 256 out (358.4) is inside: 3000 / 358.4 = 8.37
    m = model_of(roofline(12.0, 3000.0, 0.05), model="m", hardware="h", margin=0.0)
    assert m.lengths == pytest.approx((70.4, 460.8), rel=1e-3)
    cap, clamped = m.capacity_rps([32000.0, 10.0, 2048.0], [1000.0, 5.0, 256.0])
    assert clamped.tolist() == [True, True, False]
    assert cap.tolist() == pytest.approx([3000 / 460.8, 12.0, 3000 / 358.4], rel=2e-3)


def test_the_model_is_one_translation_into_the_binding_load():
    # recommended (margin 0.2): Q' = 9.6 req/s, T' = 2400 tokens/s, w 0.05, lengths 70.4 .. 460.8.
    # The trigger's target is qpsPerReplica 4: requests count 4 / 9.6 each, tokens 4 / 2400 each.
    #   20 req/s of 1024 in + 64 out (115.2 weighted each, 2304 tokens/s): max(20 x 4/9.6 = 8.33, 2304 x 4/2400 =
    #   3.84) = 8.33 = 4 x (20 / 9.6): requests bind
    #   5 req/s of 4096 in + 256 out (460.8 each, 2304 tokens/s): max(2.08, 3.84) = 3.84: tokens bind
    #   2 req/s of 40,000 in + 1000 out (3000 each, 6000/s): held at 460.8 -> 921.6 tokens/s -> 1.536
    m = model_of(roofline(12.0, 3000.0, 0.05), model="m", hardware="h", margin=0.2)
    cap = m.token_capacity()
    assert (cap.requests_per_replica, cap.tokens_per_replica) == pytest.approx((9.6, 2400.0), rel=2e-3)
    r = np.array([20.0, 5.0, 2.0])
    k = cap.weighted(np.array([20 * 1024.0, 5 * 4096.0, 2 * 40000.0]), np.array([20 * 64.0, 5 * 256.0, 2000.0]))
    load, bind = cap.load(r, k, 4.0)
    assert load.tolist() == pytest.approx([4 * 20 / 9.6, 2304 * 4 / 2400, 921.6 * 4 / 2400], rel=3e-3)
    assert bind.tolist() == [False, True, True]
    # replicas = load / qpsPerReplica is the model's own count whatever the target: 20 / 9.6 = 2.08 replicas
    assert load[0] / 4.0 == pytest.approx(20 / float(m.capacity_rps(1024, 64)[0]), rel=1e-9)
    assert cap.clamp(r, k)[1].tolist() == [False, False, True]


def test_a_plain_token_budget_is_the_binding_load_unchanged():
    from scaler.tokens import binding_load

    r, k = np.array([10.0, 10.0, np.nan, 4.0]), np.array([1000.0, 3000.0, 500.0, np.nan])
    for a, b in zip(TokenCapacity(400.0).load(r, k, 2.0), binding_load(r, k, 2.0, 400.0)):
        np.testing.assert_array_equal(a, b)


def good_doc(**over) -> dict:
    m = model_of(roofline(12.0, 3000.0, 0.05), model="meta-llama/Llama-3.1-8B", hardware="1x H100", margin=0.2)
    doc = document(m, version="test")
    doc.update(over)
    return doc


def test_the_file_round_trips(tmp_path):
    p = tmp_path / "cap.json"
    p.write_text(json.dumps(good_doc()))
    m = read(p)
    assert (m.model, m.hardware, m.margin) == ("meta-llama/Llama-3.1-8B", "1x H100", 0.2)
    assert m.qps_per_replica == pytest.approx(9.6, rel=1e-6) and len(m.points) == 6
    assert json.loads(p.read_text())["schema"] == SCHEMA


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.update(schema="forescale.loadtest/v1"), "schema 'forescale.loadtest/v1', expected"),
    (lambda d: d["fit"].update(tokens_per_second=-5), "tokens_per_second is -5; accepted: a finite number > 0"),
    (lambda d: d["fit"].update(requests_per_second=float("nan")), "requests_per_second is nan"),
    (lambda d: d["fit"].update(input_weight=-0.1), "input_weight is -0.1"),
    (lambda d: d["fit"].pop("max_error"), "max_error missing"),
    (lambda d: d["recommended"].update(qps_per_replica=50.0), "recommended.qps_per_replica is 50, but the fit"),
    (lambda d: d["lengths"].update(weighted=[500, 70]), "lengths.weighted is [500, 70]"),
    (lambda d: d["points"][2].update(capacity_rps=-1), "points[2]: capacity_rps is -1"),
    (lambda d: d.update(model=""), "model is ''; accepted: the name of the served model"),
])
def test_a_bad_file_is_refused_naming_the_value(tmp_path, mutate, needle):
    doc = good_doc()
    mutate(doc)
    p = tmp_path / "cap.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(CapacityModelError) as e:
        read(p)
    assert needle in str(e.value) and f"--capacity-model {p}" in str(e.value)


def test_nan_in_the_json_text_is_refused():
    doc = good_doc()
    doc["fit"]["tokens_per_second"] = float("nan")
    text = json.dumps(doc)  # Python writes NaN, which JSON does not have: read as a number, refused as one
    assert '"tokens_per_second": NaN' in text
    with pytest.raises(CapacityModelError, match="tokens_per_second is nan"):
        loads(text, "cap.json")


@pytest.mark.parametrize("text, needle", [("", "empty"), ("   \n", "empty"), ("{not json", "not JSON"),
                                          ("[1, 2]", "a JSON list, not an object"), (b"\xff\xfe{}", "not UTF-8")])
def test_a_malformed_or_empty_file_is_refused(text, needle):
    with pytest.raises(CapacityModelError, match=needle):
        loads(text, "cap.json")


def test_a_file_of_another_model_is_refused_naming_both():
    with pytest.raises(CapacityModelError) as e:
        loads(json.dumps(good_doc()), "cap.json", expect_model="mistral-7b")
    msg = str(e.value)
    assert "measured on model 'meta-llama/Llama-3.1-8B' (1x H100), not on 'mistral-7b'" in msg


def test_a_missing_file_and_a_huge_one(tmp_path):
    with pytest.raises(CapacityModelError, match="cannot be read"):
        read(tmp_path / "nope.json")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (2 << 20))
    with pytest.raises(CapacityModelError, match="accepted: a capacity file of at most 1024 KiB"):
        read(big)


@pytest.mark.parametrize("points, needle", [
    ([Point(128, 64, 5.0), Point(128, 256, 3.0)], "at least two prompt lengths and two answer lengths"),
    ([Point(128, 64, 5.0), Point(1024, 256, math.nan)], "capacity_rps nan"),
    ([Point(128, 64, 5.0), Point(1024, -1, 2.0)], "output_tokens -1"),
])
def test_a_grid_that_cannot_be_fitted(points, needle):
    with pytest.raises(CapacityModelError, match=needle):
        fit(points)
