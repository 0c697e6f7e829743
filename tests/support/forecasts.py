"""Forecast helpers shared by the tests of ``predict_origins``: bit-for-bit equality, and a forecaster whose fits
hide ``predict_origins`` so that ``historical_forecasts`` forecasts one cutoff at a time from them."""

from __future__ import annotations


def same(a, b) -> bool:
    """Two Forecasts equal bit for bit: times, mean, model and every quantile."""
    return (a.t.tobytes() == b.t.tobytes() and a.mean.tobytes() == b.mean.tobytes() and a.model == b.model
            and list(a.quantiles) == list(b.quantiles)
            and all(a.quantiles[q].tobytes() == b.quantiles[q].tobytes() for q in a.quantiles))


class Hidden:
    """A fit whose class offers no predict_origins, forwarding everything else it is asked (as HolidayFitted
    does): a lookup on the class finds none, a lookup on the instance would."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        if name.startswith("__") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class OneAtATime:
    """A forecaster whose fits are ``Hidden``: ``historical_forecasts`` forecasts one cutoff at a time from them."""

    def __init__(self, inner):
        self.inner, self.name = inner, inner.name

    def fit(self, s, *, warm_start=None):
        return Hidden(self.inner.fit(s, warm_start=warm_start.inner if warm_start is not None else None))
