"""Auto: pick one model per series by a rolling-origin score on its recent history.

``fit``: the last ``validation`` seconds (at most a quarter of the history)
are held out; every candidate is fitted on the history before them and
forecasts from cutoffs across them (every ``stride`` steps, no refit, later
origins via ``predict(origin=..., recent=...)``), level-corrected with
``level_half_life`` exactly as the policy will use it, and is scored at
``lead`` seconds ahead. The score is what the policy needs:

* with ``quantile`` (the server and the replay pass the provisioned one):
  the pinball loss of that quantile, so a model whose band is too wide or too
  narrow loses even when its mean is as good; every model competes
  (``CANDIDATES``);
* without it: the MASE of the mean, among the models whose bands are
  calibrated at these horizons (``MASE_CANDIDATES``).

The lowest score wins (ties go to the earlier candidate), and is refitted on
the whole history. ``Fitted.chosen`` says which, ``Fitted.scores`` the
validation score of each (NaN: it could not be fitted), and forecasts carry
``model="auto:<chosen>"``.

With too little history to validate (fewer than ``min_cutoffs`` cutoffs),
the first candidate that fits is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..base import FitFailed, Fitted, Forecast, Forecaster, InsufficientHistory, Series
from ..level import DEFAULT_HALF_LIFE_SECONDS, level_correct
from ..metrics import mase, pinball
from ._common import Wrapping

NAME = "auto"
CANDIDATES = ("prophet", "seasonal_naive", "naive", "linear_trend", "envelope", "mstl", "ets")
# scored on the mean (no quantile given): the models whose q0.9 band is calibrated at the policy's short
# horizons with level correction. MSTL and ETS are left out there: their bands cover 0.96-1.00 (far too
# wide), and a MASE win on the mean would make the policy provision that band; the envelope's band is a
# margin. Scored on the provisioned quantile, every model competes: a miscalibrated band loses by itself.
MASE_CANDIDATES = ("prophet", "seasonal_naive", "naive", "linear_trend")


@dataclass(frozen=True, eq=False)
class AutoForecaster:
    seed: int = 0
    candidates: tuple[str, ...] | None = None  # None: CANDIDATES with a quantile, else MASE_CANDIDATES
    quantile: float | None = None  # score by this quantile's pinball loss (the one the policy provisions)
    lead: float = 300.0  # seconds ahead the selection is scored at
    validation: float = 86400.0  # seconds held out
    cutoffs: int = 96  # about this many validation cutoffs
    min_cutoffs: int = 12
    level_half_life: float = DEFAULT_HALF_LIFE_SECONDS
    options: dict = field(default_factory=dict)  # per-candidate options, e.g. {"prophet": {"fit_step": 600}}
    # the registry's ``make`` (``forecaster.models.make`` passes itself): the candidates are built through it, so this
    # module never imports the registry that imports it
    make: Callable[..., Forecaster] | None = field(default=None, repr=False, compare=False)

    name = NAME

    def _make(self, name: str):
        if self.make is None:
            raise FitFailed("auto needs the registry's make to build its candidates: use forecaster.models.make('auto')")
        make = self.make
        opts = {"seed": self.seed, **self.options.get(name, {})}
        if name in ("prophet", "seasonal_naive"):
            opts.setdefault("level_half_life", self.level_half_life)
        return make(name, **opts)

    def _candidates(self) -> tuple[str, ...]:
        if self.candidates is not None:
            return tuple(self.candidates)
        if self.quantile is None:
            return MASE_CANDIDATES
        from .statsf import STATS_MODELS, statsforecast_available  # the extra may be absent: compete without it

        return CANDIDATES if statsforecast_available() else tuple(c for c in CANDIDATES if c not in STATS_MODELS)

    def fit(self, series: Series, *, warm_start=None) -> "AutoFitted":
        if self.quantile is not None and not 0 < self.quantile < 1:
            raise ValueError(f"auto: quantile {self.quantile!r}: accepted is a number strictly between 0 and 1")
        candidates = self._candidates()
        for c in candidates:
            if c == NAME or c not in CANDIDATES:
                raise ValueError(f"auto: unknown candidate {c!r}; accepted: {', '.join(CANDIDATES)}")
        step = series.step
        h = max(1, int(round(self.lead / step)))
        n_val = min(int(self.validation // step), len(series) // 4)
        stride = max(1, n_val // max(1, self.cutoffs))
        n_cut = (n_val - h) // stride + 1 if n_val > h else 0
        scores: dict[str, float] = {}
        if n_cut >= self.min_cutoffs:
            split = len(series) - n_val
            train = Series(series.t[:split], series.y[:split], step)
            insample = train.y
            for name in candidates:
                scores[name] = self._score(name, train, series, split, h, stride, insample)
        order = [c for c in candidates if math.isfinite(scores.get(c, math.nan))]
        order.sort(key=lambda c: scores[c])  # stable: ties keep the candidates' order
        order += [c for c in candidates if c not in order]
        prev = warm_start.inner if isinstance(warm_start, AutoFitted) else None
        last_err: Exception | None = None
        for name in order:
            try:
                ws = prev if prev is not None and prev.model == name else None
                inner = self._make(name).fit(series, warm_start=ws)
            except (InsufficientHistory, FitFailed) as e:
                last_err = e
                continue
            return AutoFitted(inner=inner, scores={c: scores.get(c, math.nan) for c in candidates})
        raise InsufficientHistory(f"auto: no candidate could be fitted ({last_err})")

    def _score(self, name: str, train: Series, full: Series, split: int, h: int, stride: int,
               insample: np.ndarray) -> float:
        try:
            fitted = self._make(name).fit(train)
        except (InsufficientHistory, FitFailed):
            return math.nan
        step = full.step
        lo = max(0, split - 10)
        q = self.quantile
        qs = () if q is None else (q,)
        actual, pred = [], []
        for i in range(split, len(full) - h + 1, stride):  # i: index of the cutoff
            now_i = i - 1
            recent = Series(full.t[lo:i], full.y[lo:i], step)
            # the curve as the server holds it covers ``now``: the model's value there, made one step earlier
            at_now = fitted.predict(1, qs, origin=full.t[now_i] - step, recent=recent)
            fc = fitted.predict(h, qs, origin=full.t[now_i], recent=recent)
            bands = {k: np.concatenate((at_now.quantiles[k], fc.quantiles[k])) for k in qs}
            curve = Forecast(np.concatenate((at_now.t, fc.t)), np.concatenate((at_now.mean, fc.mean)), bands,
                             model=fc.model)
            obs = full.y[now_i]
            if np.isfinite(obs) and self.level_half_life > 0:
                curve = level_correct(curve, full.t[now_i], float(obs), self.level_half_life)
            actual.append(full.y[now_i + h])
            pred.append(curve.mean[h] if q is None else curve.quantiles[q][h])
        if q is not None:
            return pinball(np.array(actual), np.array(pred), q)
        return mase(np.array(actual), np.array(pred), insample, 1)


@dataclass(frozen=True, eq=False)
class AutoFitted(Wrapping):
    inner: Fitted  # the chosen model's
    scores: dict
    model: str = NAME

    def predict(self, horizon: int, quantiles: Sequence[float] = (), *, origin: float | None = None,
                recent: Series | None = None) -> Forecast:
        fc = self.inner.predict(horizon, quantiles, origin=origin, recent=recent)
        return Forecast(fc.t, fc.mean, fc.quantiles, f"{NAME}:{self.chosen}")

    def to_state(self) -> dict:
        return {"model": NAME, "version": 1, "chosen": self.chosen, "inner": self.inner.to_state(),
                "scores": {k: (v if math.isfinite(v) else None) for k, v in self.scores.items()}}

    nests = True  # its state holds another model's: the registry passes its ``from_state`` (``restore``)

    @staticmethod
    def from_state(d: dict, restore: Callable[[dict], Fitted]) -> "AutoFitted":
        if d.get("model") != NAME:
            raise ValueError(f"state is for model {d.get('model')!r}, not {NAME!r}")
        inner = restore(d["inner"])
        scores = {k: (math.nan if v is None else float(v)) for k, v in d.get("scores", {}).items()}
        return AutoFitted(inner=inner, scores=scores)
