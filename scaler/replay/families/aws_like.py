"""``aws_like``: AWS predictive scaling re-implemented (``anchors.aws_values``, ``published``)."""

from ..anchors import aws_values
from .published import Published

FAMILY = Published("aws_like", aws_values)
