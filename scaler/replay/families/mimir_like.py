"""``mimir_like``: Grafana Mimir's predictive trigger re-implemented (``anchors.mimir_values``, ``published``)."""

from ..anchors import mimir_values
from .published import Published

FAMILY = Published("mimir_like", mimir_values)
