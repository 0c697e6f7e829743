"""What one replay runs with (``Settings``: every knob of a backtest, defaults the scaler's documented metadata
defaults), what it runs on (``Trace``) and how bad input is refused (``ReplayError``): ``engine.run``'s inputs,
plain data, read by the engine, the families' defaults (``families.base.Knobs``) and every verb that builds one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from forecaster.base import Series
from forecaster.calendar import DEFAULT_HOLIDAY_AS_CODE

from ..spec import DEFAULTS, LeadTime, parse_duration
from ..feedback import RULE, Rule, Targets
from ..tokens import TokenCapacity
from .llm import ITL_SECONDS
from .families import POLICIES, TABLE
from .forecasts import quiet_prophet_import
from .hpa import Hpa
from .scenario import DAY
from .world import World


class ReplayError(ValueError):
    """Bad input for a replay: the message names what was wrong and what is accepted."""


@dataclass(frozen=True)
class Trace:
    name: str
    series: Series
    hygiene: str  # the HygieneReport's one-line message
    source: str  # path or URL
    attribution: str = ""
    counts: bool = False  # requests as they arrived (a CSV): forecast from what the query reads (rate_view)
    # a trace with shape: prompt and generated tokens/s on series.t (a CSV's input_tokens, output_tokens)
    input_tokens: np.ndarray | None = field(default=None, compare=False, repr=False)
    output_tokens: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def has_tokens(self) -> bool:
        return self.input_tokens is not None and self.output_tokens is not None


@dataclass(frozen=True)
class Settings:
    """Every knob of one backtest (defaults: the scaler's documented metadata defaults)."""

    cold_start_seconds: float = float(DEFAULTS["coldStartSeconds"])
    qps_per_replica: float | None = None  # None: derived from the simulated span's peak
    buffer_seconds: float | None = None  # None: forecastErrorSeconds + schedulingSeconds + readinessSeconds
    model: str = DEFAULTS["model"]
    quantile: float = float(DEFAULTS["quantile"])
    history_seconds: float = parse_duration(DEFAULTS["history"])
    refit_seconds: float = parse_duration(DEFAULTS["refitInterval"])
    span_seconds: float = 2 * DAY
    sim_start: float | None = None
    level_correction_seconds: float = parse_duration(DEFAULTS["levelCorrection"])
    headroom: float = float(DEFAULTS["headroom"])
    hpa_tolerance: float = float(DEFAULTS["hpaTolerance"])  # the emulated HPA's and the policy's
    min_replicas: int = Hpa.min_replicas  # KEDA's minReplicaCount default
    max_replicas: int = Hpa.max_replicas  # KEDA's maxReplicaCount default
    activation_threshold: float = float(DEFAULTS["activationThreshold"])
    hybrid_floor_percentile: float = 10.0
    policies: tuple[str, ...] = POLICIES
    seed: int = 0
    holidays: str = ""  # holidays: "US", "US-CA" (forecaster.calendar); "" = off
    holiday_window: int = 0  # holidayWindow, days
    holiday_as: int = DEFAULT_HOLIDAY_AS_CODE  # holidayAs (forecaster.calendar)
    timezone: str = DEFAULTS["timezone"]  # timezone: the IANA zone whose calendar days the holidays are
    events: tuple = ()  # forecaster.eventsfile.Event: multipliers and floors on the planned rate
    holiday_handling: bool = True  # False: the holidays only split the accuracy, the forecast ignores them (tune)
    world: World = World()  # the cluster, the queue, the scenarios (default: none of them, today's numbers)
    aligned: bool = False  # refits on the clock (forecasts.run_model): the server's tuning; off for the CLI
    tokens: TokenCapacity | None = None  # a replica's token budget: judge on the binding load (replay.tokenload)
    token_aware: bool = True  # with tokens: scale on the binding load (False: on req/s alone, the baseline)
    loop: Targets | None = None  # the closed loop's targets (scaler.feedback): every HPA family runs it (closedloop)
    loop_rule: Rule = RULE  # its constants (the server's; a benchmark may try others)
    itl_seconds: float = ITL_SECONDS  # a lone request's inter-token latency (llm: TTFT and ITL)
    # the replicas really sustain 1/capacity_factor of qpsPerReplica (and of tokensPerReplica): a capacity
    # configured too high; the judged load is capacity_factor x the trace's (its requests counted in that unit)
    capacity_factor: float = 1.0
    # capacity: learned replayed (saturation.Online, in closedloop): the server's estimator fed at each call, the
    # plan in replicas of the figure in force (the headroom x configured / in force), call by call
    capacity_learned: bool = False

    @property
    def llm_figures(self) -> bool:
        """TTFT and ITL per policy (``ttft_p95_s``, ``itl_p95_s``): with tokens or the loop."""
        return self.tokens is not None or self.loop is not None or self.capacity_learned

    def lead(self) -> LeadTime:
        lt = LeadTime(
            self.cold_start_seconds,
            float(DEFAULTS["forecastErrorSeconds"]),
            float(DEFAULTS["schedulingSeconds"]),
            float(DEFAULTS["readinessSeconds"]),
            self.buffer_seconds,
        )
        return lt

    def holiday_days(self, t_first: float, t_last: float) -> tuple[int, ...]:
        """The days (local to ``timezone``) of ``holidays`` (with ``holiday_window``) between two times; () when off."""
        if not self.holidays:
            return ()
        from forecaster.calendar import holiday_days

        return tuple(holiday_days(self.holidays, t_first, t_last, self.holiday_window, self.timezone))

    def validate(self) -> None:
        if not (math.isfinite(self.cold_start_seconds) and self.cold_start_seconds >= 0):
            raise ReplayError(f"cold start {self.cold_start_seconds:g} s: accepted is a finite number of seconds >= 0")
        if self.qps_per_replica is not None and not (math.isfinite(self.qps_per_replica) and self.qps_per_replica > 0):
            raise ReplayError(f"qps per replica {self.qps_per_replica:g}: accepted is a finite number > 0")
        if not 0 < self.quantile < 1:
            raise ReplayError(f"quantile {self.quantile:g}: accepted is a number strictly between 0 and 1")
        table = [n for n, f in TABLE.items() if f.in_table]
        unknown = [p for p in self.policies if p not in table]
        if unknown or not self.policies:
            raise ReplayError(
                f"unknown policy {', '.join(map(repr, unknown)) or '(none given)'}; "
                f"accepted: {', '.join(table)} (comma-separated)"
            )
        quiet_prophet_import()
        from forecaster.models import NAMES

        if self.model not in NAMES:
            raise ReplayError(f"unknown model {self.model!r}; accepted: {', '.join(NAMES)}")
        if self.holidays:
            from forecaster.calendar import CalendarError, parse_holidays_spec

            try:
                parse_holidays_spec(self.holidays)
            except CalendarError as e:
                raise ReplayError(str(e)) from None
        if not 0 <= self.hpa_tolerance < 1:
            raise ReplayError(f"HPA tolerance {self.hpa_tolerance:g}: accepted is a fraction in [0, 1)")
        if self.refit_seconds <= 0 or self.span_seconds <= 0 or self.history_seconds <= 0:
            raise ReplayError("--refit, --span and --history must be positive durations")
        if self.min_replicas < 0 or self.max_replicas < max(1, self.min_replicas):
            raise ReplayError(
                f"replica bounds {self.min_replicas}..{self.max_replicas}: accepted is 0 <= min <= max, max >= 1"
            )
        if not (math.isfinite(self.capacity_factor) and 0.1 <= self.capacity_factor <= 10):
            raise ReplayError(
                f"capacity factor {self.capacity_factor!r}: accepted is a number in [0.1, 10] (the "
                "replicas sustain 1/factor of qpsPerReplica)"
            )
        if not (math.isfinite(self.itl_seconds) and self.itl_seconds > 0):
            raise ReplayError(f"inter-token latency {self.itl_seconds!r} s: accepted is a finite number of seconds > 0")
        if (self.loop is not None or self.capacity_learned) and self.world.cluster_on:
            raise ReplayError(
                "the closed loop and capacity: learned are replayed against the HPA's ready replicas and the queue, "
                "not the cluster's: accepted is the loop or --capacity learned, or a cluster option "
                "(--gpus-per-node, --pools, --phases, pod-kill scenarios), not both"
            )
        try:
            self.world.validate(self.cold_start_seconds)
        except ValueError as e:
            raise ReplayError(str(e)) from None
