"""``linear_trend``: the seed predictor (mean of the last points + trend) as a policy (``fixedmodel``)."""

from .fixedmodel import FixedModel

FAMILY = FixedModel("linear_trend", in_table=True)
