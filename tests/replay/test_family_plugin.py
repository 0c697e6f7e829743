"""A policy family is one module plus one line: ``Doubled`` below is a whole family written in the tests (its
knobs, its configurations, its evaluation, its label) and ``families.register`` is the line. The engine, the sweep,
the labels, the knobs and the table reach it as they reach the built-ins, with no other file changed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from forecaster.base import Series
from scaler.replay import engine, families, frontier, variants
from scaler.replay.families.base import PolicyFamily, Stage1
from scaler.replay.hpa import value_ticks
from scaler.replay.policies import Context
from scaler.replay.variant import Variant

DAY = 86400.0
RATE, QPS = 45.0, 15.0  # a flat 45 req/s on replicas of 15 req/s: reactive needs ceil(45 / 15) = 3


class Doubled(PolicyFamily):
    """Twice the observed rate at each poll, through KEDA and the HPA; knob: ``headroom`` (1 and 1.5 swept)."""

    name = "doubled"
    compensated = False  # its habit, as reactive's: the value as it is (the notes say when it is pushed)

    def default(self, s: Any) -> Variant:
        return Variant(self.name, compensation=False)

    def sweep(self, grid: Any, s: Any) -> list[Variant]:
        return [self.default(s), Variant(self.name, headroom=1.5, compensation=False)]

    def stage1(self, ctx: Context, v: Variant, packed) -> Stage1:
        asked = value_ticks(ctx.scenario.n, ctx.hpa, ctx.scenario.tick)  # the ticks KEDA asks the scaler at
        return 2.0 * ctx.scenario.observed[asked], {}, ctx.hpa, "twice the observed rate", {}


@pytest.fixture
def doubled():
    families.register(Doubled())  # the one line a family needs
    yield
    families.unregister("doubled")


def flat(days: float = 2.0, step: float = 60.0) -> engine.Trace:
    t = 1_700_006_400.0 + step * np.arange(int(days * DAY / step))
    return engine.Trace("flat", Series(t, np.full(len(t), RATE), step), "synthetic", "memory")


def settings(**kw) -> engine.Settings:
    return engine.Settings(**{**dict(model="linear_trend", span_seconds=12 * 3600, history_seconds=DAY,
                                     qps_per_replica=QPS, policies=("reactive", "doubled")), **kw})


def test_a_registered_family_is_a_row_of_the_table_and_a_point_of_the_plane(doubled):
    s = settings()
    r = engine.run(flat(), s, variants.defaults(s))
    assert list(r.policies) == ["reactive", "doubled"]
    # reactive: 45 / 15 = 3 replicas all along; doubled: 2 x 45 = 90 req/s -> ceil(90 / 15) = 6; 12 h each
    assert r.policies["reactive"].outcome.replica_hours == pytest.approx(3 * 12.0)
    assert r.policies["doubled"].outcome.replica_hours == pytest.approx(6 * 12.0)
    assert r.policies["doubled"].note == "twice the observed rate"
    assert r.policies["doubled"].outcome.underprovisioned_fraction == 0.0
    point = next(p for p in r.points if p.policy == "doubled")
    assert point.label == "doubled x1 no dead-band comp." and point.default and not point.selectable
    assert point.knobs(r.tolerance) == {"headroom": 1.0, "hpaTolerance": 0.0}


def test_a_registered_family_is_swept_and_never_selected_when_it_cannot_be_deployed(doubled):
    s = settings()
    grid = variants.Grid(families=("reactive", "doubled"))
    vs = variants.variants(grid, s)
    assert [families.label(v) for v in vs if v.policy == "doubled"] == ["doubled x1 no dead-band comp.",
                                                                        "doubled x1.5 no dead-band comp."]
    r = engine.run(flat(), s, vs)
    # x1.5: 2 x 45 x 1.5 = 135 req/s -> 9 replicas, 9 x 12 = 108 replica-hours
    assert {p.variant.headroom: p.cost for p in r.points if p.policy == "doubled"} == pytest.approx({1.0: 72.0,
                                                                                                   1.5: 108.0})
    sel = frontier.select(r.points, target_miss=0.0, families=("reactive", "doubled"))
    assert sel.point.policy == "reactive"  # doubled is not expressible as metadata: never chosen
    with pytest.raises(ValueError, match="doubled is not expressible"):
        families.deployment(Variant("doubled"), tolerance=0.1)


def test_an_unknown_family_is_refused_by_name(doubled):
    with pytest.raises(engine.ReplayError, match="unknown policy family 'tripled'; accepted: reactive, .*doubled"):
        engine.run(flat(), settings(), [Variant("tripled")])
    with pytest.raises(ValueError, match="taken"):
        families.register(Doubled())
    families.unregister("doubled")
    with pytest.raises(engine.ReplayError, match="unknown policy 'doubled'"):
        engine.run(flat(), settings(), [])
    families.register(Doubled())  # for the fixture's teardown
