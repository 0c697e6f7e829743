"""Prometheus access, through ``prometheus-api-client`` only.

One ``PrometheusClient`` per (target, credentials): instant queries for the
observed rate and T_cold, range queries (split to respect Prometheus' 11,000
points per series) for the forecast history, and that history as one regular
``Series`` (``range_series``: the one place where a range answer becomes one).
Credentials are held by the scaler (``CredentialStore``), selected by name from
the metadata; no secret is ever logged or put in an error message.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from forecaster.base import Series
from forecaster.series import HygieneReport, from_prometheus_matrix

from .spec import PrometheusTarget

log = logging.getLogger(__name__)

MAX_POINTS = 11_000  # Prometheus refuses range queries above this many points per series


class PromErrorKind(str, Enum):
    UNREACHABLE = "unreachable"  # connection refused, DNS, timeout, TLS failure, HTTP 5xx
    REJECTED = "rejected"  # HTTP 4xx: bad PromQL, auth refused
    NO_DATA = "no_data"  # empty result with ignoreNullValues=false
    MULTIPLE_SERIES = "multiple_series"
    BAD_VALUE = "bad_value"  # NaN/Inf with ignoreNullValues=false
    CREDENTIALS = "credentials"  # the named credential set is missing or unreadable


class PromError(Exception):
    def __init__(self, kind: PromErrorKind, message: str):
        self.kind = kind
        super().__init__(message)


@dataclass(frozen=True)
class Credentials:
    """One credential set. ``repr`` shows which parts exist, never their values."""

    name: str
    bearer_token: str | None = field(default=None, repr=False)
    basic: tuple[str, str] | None = field(default=None, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def describe(self) -> str:
        parts = [p for p, v in (("bearer", self.bearer_token), ("basic", self.basic),
                                ("ca", self.ca_file), ("client-cert", self.cert_file)) if v]
        return f"{self.name}({', '.join(parts) or 'empty'})"


class CredentialStore:
    """Credential sets as files: ``<root>/<name>/{token | username,password | ca.crt | tls.crt,tls.key}``.

    This is how a Kubernetes Secret mounted as a volume looks. Files are read
    each time a client is built, so rotated secrets are picked up.
    """

    def __init__(self, root: str | os.PathLike | None):
        self.root = Path(root) if root else None

    def get(self, name: str) -> Credentials | None:
        if not name:
            return None
        if self.root is None:
            raise PromError(PromErrorKind.CREDENTIALS,
                            f"credentials '{name}' requested but the scaler has no credentials directory "
                            "(--credentials-dir or FORESCALE_CREDENTIALS_DIR)")
        d = self.root / name
        if not d.is_dir():
            raise PromError(PromErrorKind.CREDENTIALS,
                            f"credentials '{name}': no directory {d}; expected files token, or username+password, "
                            "and/or ca.crt, tls.crt+tls.key")

        def read(fname: str) -> str | None:
            p = d / fname
            try:
                return p.read_text().strip() if p.is_file() else None
            except OSError as e:
                raise PromError(PromErrorKind.CREDENTIALS, f"credentials '{name}': cannot read {p}: {e.strerror}") from None

        token = read("token")
        user, password = read("username"), read("password")
        if (user is None) != (password is None):
            raise PromError(PromErrorKind.CREDENTIALS, f"credentials '{name}': basic auth needs both username and password files")
        cert, key = d / "tls.crt", d / "tls.key"
        if cert.is_file() != key.is_file():
            raise PromError(PromErrorKind.CREDENTIALS, f"credentials '{name}': a client certificate needs both tls.crt and tls.key")
        if token and user:
            raise PromError(PromErrorKind.CREDENTIALS, f"credentials '{name}': give either token or username+password, not both")
        ca = d / "ca.crt"
        return Credentials(
            name=name,
            bearer_token=token,
            basic=(user, password) if user is not None else None,
            ca_file=str(ca) if ca.is_file() else None,
            cert_file=str(cert) if cert.is_file() else None,
            key_file=str(key) if key.is_file() else None,
        )


def _ts(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc)


class PrometheusClient:
    """Queries one Prometheus with the target's headers, parameters, TLS and credentials."""

    def __init__(self, target: PrometheusTarget, credentials: Credentials | None = None):
        self.target = target
        headers = dict(target.custom_headers)
        session = requests.Session()
        session.verify = not target.unsafe_ssl
        auth = None
        if credentials is not None:
            if credentials.bearer_token:
                headers["Authorization"] = f"Bearer {credentials.bearer_token}"
            if credentials.basic:
                auth = credentials.basic
            if credentials.ca_file and not target.unsafe_ssl:
                session.verify = credentials.ca_file
            if credentials.cert_file:
                session.cert = (credentials.cert_file, credentials.key_file)
        self._params = dict(target.query_parameters)
        self._conn = PrometheusConnect(
            url=target.server_address,
            headers=headers or None,
            disable_ssl=target.unsafe_ssl,
            # one quick retry on 502-504; a refresher retries on its own schedule
            retry=Retry(total=1, backoff_factor=0.05, status_forcelist=(502, 503, 504), raise_on_status=False),
            auth=auth,
            session=session,
            timeout=target.timeout_seconds,
        )

    def _call(self, fn, *args, **kwargs) -> Any:
        where = self.target.server_address
        try:
            return fn(*args, **kwargs)
        except PrometheusApiClientException as e:
            text = str(e)
            status = text.split("HTTP Status Code ", 1)[-1].split(" ", 1)[0]
            kind = PromErrorKind.UNREACHABLE if status.startswith("5") else PromErrorKind.REJECTED
            raise PromError(kind, f"Prometheus at {where} answered {_short(text)}") from None
        except requests.exceptions.SSLError:
            raise PromError(PromErrorKind.UNREACHABLE, f"Prometheus at {where}: TLS verification failed "
                            "(set a CA in the credentials, or unsafeSsl=true)") from None
        except requests.exceptions.Timeout:
            raise PromError(PromErrorKind.UNREACHABLE,
                            f"Prometheus at {where} did not answer within {self.target.timeout_seconds:g}s") from None
        except (requests.exceptions.JSONDecodeError, KeyError, TypeError) as e:  # not a Prometheus API answer
            raise PromError(PromErrorKind.UNREACHABLE, f"Prometheus at {where} sent an unreadable answer: "
                            f"{type(e).__name__}") from None
        except requests.exceptions.RequestException as e:
            raise PromError(PromErrorKind.UNREACHABLE, f"Prometheus at {where} is unreachable: {type(e).__name__}") from None
        except ValueError as e:  # a non-JSON body
            raise PromError(PromErrorKind.UNREACHABLE, f"Prometheus at {where} sent an unreadable answer: {e}") from None

    def instant(self, query: str, at: float | None = None) -> list[dict]:
        params = dict(self._params)
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._call(self._conn.custom_query, query, params=params)

    def scalar(self, query: str, at: float | None = None, *, ignore_null: bool = True) -> float:
        """The single value of an instant query, with KEDA's Prometheus-scaler semantics.

        Empty result: 0 with ``ignore_null`` else NO_DATA. Several series:
        MULTIPLE_SERIES. NaN/Inf: 0 with ``ignore_null`` else BAD_VALUE.
        Negative values are returned as they are (the caller floors rates).
        """
        result = self.instant(query, at)
        if not result:
            if ignore_null:
                return 0.0
            raise PromError(PromErrorKind.NO_DATA, f"query returned no series (ignoreNullValues=false): {query}")
        if len(result) > 1:
            raise PromError(PromErrorKind.MULTIPLE_SERIES,
                            f"query returned {len(result)} series; expected exactly one "
                            f"(aggregate it, e.g. sum(...)): {query}")
        item = result[0]
        raw = item.get("value", [None, None])[1] if "value" in item else None
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise PromError(PromErrorKind.BAD_VALUE, f"query returned a non-numeric value {raw!r}: {query}") from None
        if not math.isfinite(value):
            if ignore_null:
                return 0.0
            raise PromError(PromErrorKind.BAD_VALUE, f"query returned {raw} (ignoreNullValues=false): {query}")
        return value

    def range(self, query: str, start: float, end: float, step: float) -> list[dict]:
        """A range query split into chunks of at most ``MAX_POINTS`` points, merged per series."""
        if step <= 0 or end < start:
            raise ValueError(f"bad range: start={start} end={end} step={step}")
        chunk = step * (MAX_POINTS - 1)
        merged: dict[tuple, dict] = {}
        t0 = start
        while t0 <= end:
            t1 = min(end, t0 + chunk)
            part = self._call(self._conn.custom_query_range, query, start_time=_ts(t0), end_time=_ts(t1),
                              step=f"{step:g}s", params=dict(self._params))
            for s in part:
                key = tuple(sorted(s.get("metric", {}).items()))
                merged.setdefault(key, {"metric": s.get("metric", {}), "values": []})["values"].extend(s.get("values", []))
            t0 = t1 + step
        return list(merged.values())

    def range_series(self, query: str, start: float, end: float, step: float) -> tuple[Series, HygieneReport]:
        """``range`` as one regular ``Series`` at ``step`` (hygiene applied), with what hygiene found.

        No series: NO_DATA; several: MULTIPLE_SERIES (a rate for forecasting
        must aggregate to one); malformed samples: ValueError.
        """
        result = self.range(query, start, end, step)
        if not result:
            raise PromError(PromErrorKind.NO_DATA, f"range query returned no series: {query}")
        if len(result) > 1:
            raise PromError(PromErrorKind.MULTIPLE_SERIES,
                            f"range query returned {len(result)} series; expected exactly one "
                            f"(aggregate it, e.g. sum(...)): {query}")
        return from_prometheus_matrix(result, step)


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
