"""``seasonal_naive``: the same moment yesterday / last week as a policy (``fixedmodel``); swept, not a table row."""

from .fixedmodel import FixedModel

FAMILY = FixedModel("seasonal_naive", in_table=False)
