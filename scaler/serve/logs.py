"""The server's log lines (``--log-format``): text, one line per record with control characters escaped, or JSON.

A newline in a ScaledObject name, a metadata value or a Prometheus error would otherwise forge a log line; the
text format escapes every control character in the message, the JSON format writes one object per line.
"""

from __future__ import annotations

import json
import logging
import time

CONTROL = {c: f"\\x{c:02x}" for c in range(32) if c not in (9,)}
CONTROL.update({10: "\\n", 13: "\\r", 0x7f: "\\x7f", 0x85: "\\x85", 0x2028: "\\u2028", 0x2029: "\\u2029"})


class TextFormatter(logging.Formatter):
    """Text logs, one line per record: control characters in the message (a newline in a ScaledObject name,
    a metadata value, a Prometheus error) are escaped, so no value can forge a line."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = record.message.translate(CONTROL)
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """``--log-format json``: one object per line (time, level, logger, message, exception)."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def setup_logging(level: str, fmt: str) -> None:
    """The root logger at ``level`` (``--log-level``), its one handler writing ``fmt`` ("text" or "json")."""
    handler = logging.StreamHandler()
    if fmt == "json":
        formatter = JsonFormatter()
        formatter.converter = time.gmtime  # its times in UTC, as the trailing Z says
        handler.setFormatter(formatter)
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
