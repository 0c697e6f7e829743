"""Trigger metadata: defaults, aliases, and every bad value named in its error."""

import random
import re

import pytest

from forecaster.calendar import LEARNED
from support.paths import REPO
from scaler.misstarget import MissTarget
from scaler.spec import DEFAULTS, KEYS, MetadataError, parse_duration, parse_metadata
from scaler.specwrite import to_metadata

BASE = {"serverAddress": "http://prometheus.monitoring:9090", "query": "sum(rate(http_requests_total[2m]))",
        "qpsPerReplica": "10"}


def parse(**over):
    md = {**BASE, **over}
    md = {k: v for k, v in md.items() if v is not None}
    return parse_metadata(md, name="llm", namespace="serving")


def test_defaults_match_the_documented_table():
    spec, unknown = parse()
    assert unknown == ()
    assert spec.qps_per_replica == 10.0
    assert spec.activation_threshold == 0.0
    assert spec.ignore_null_values is True
    assert spec.prometheus.timeout_seconds == 5.0
    assert spec.metric_name == "forescale-serving-llm"
    assert spec.lead.cold_start_seconds == 180.0
    assert spec.lead.buffer_seconds == 30 + 60 + 15
    assert spec.lead.seconds == 285.0
    assert (spec.mode, spec.model, spec.quantile) == ("forecastAndScale", "prophet", 0.8)
    assert (spec.tuning, str(spec.target_miss), spec.max_cost_ratio) == ("auto", "0.25x", 1.3)
    assert spec.tuning_min_history_seconds == 7 * 86400
    assert (spec.history_seconds, spec.step_seconds) == (14 * 86400, 60)
    assert (spec.refit_interval_seconds, spec.min_history_seconds) == (1800, 86400)
    assert (spec.headroom, spec.hpa_tolerance) == (1.0, 0.1)
    # every documented default is what the parser uses: re-parse with the defaults spelled out
    spelled = {k.name: k.default for k in KEYS if k.default not in (None, "")}
    spec2, _ = parse(**spelled)
    assert spec2 == spec


def test_threshold_is_an_alias_and_conflicts_are_named():
    spec, _ = parse(qpsPerReplica=None, threshold="2.5")
    assert spec.qps_per_replica == 2.5
    spec, _ = parse(threshold="10")
    assert spec.qps_per_replica == 10
    with pytest.raises(MetadataError, match=r"'threshold': got '5'.*same value as qpsPerReplica"):
        parse(threshold="5")


def test_buffer_override_and_parts():
    spec, _ = parse(bufferSeconds="45", coldStartSeconds="120")
    assert spec.lead.seconds == 165
    spec, _ = parse(forecastErrorSeconds="0", schedulingSeconds="45", readinessSeconds="5")
    assert spec.lead.buffer_seconds == 50


@pytest.mark.parametrize("text,seconds", [("60s", 60), ("5m", 300), ("1h30m", 5400), ("14d", 14 * 86400),
                                          ("2w", 14 * 86400), ("90", 90), ("1.5h", 5400), ("500ms", 0.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("key,value,accepted", [
    ("serverAddress", None, "http:// or https:// URL"),
    ("serverAddress", "prometheus:9090", "http:// or https:// URL"),
    ("serverAddress", "http://admin:hunter2@prom:9090", "without user:password"),  # value hidden: see below
    ("query", None, "PromQL"),
    ("qpsPerReplica", "0", "number in [0.001, 1e9]"),
    ("qpsPerReplica", "-1", "number in [0.001, 1e9]"),
    ("qpsPerReplica", "abc", "number in [0.001, 1e9]"),
    ("qpsPerReplica", "NaN", "number in [0.001, 1e9]"),
    ("qpsPerReplica", "inf", "number in [0.001, 1e9]"),
    ("qpsPerReplica", "0.0004", "number in [0.001, 1e9]"),  # 1/qps overflowed the replica count
    ("qpsPerReplica", "1e18", "number in [0.001, 1e9]"),
    ("activationThreshold", "-2", "[0, 1e12]"),
    ("ignoreNullValues", "maybe", "true or false"),
    ("unsafeSsl", "yes please", "true or false"),
    ("timeout", "0", "milliseconds"),
    ("timeout", "soon", "milliseconds"),
    ("queryParameters", "nokeyvalue", "key1=value1"),
    ("coldStartSeconds", "-5", "[0, 86400]"),
    ("coldStartSeconds", "86401", "[0, 86400]"),
    ("bufferSeconds", "x", "[0, 86400]"),
    ("mode", "aggressive", "forecastAndScale | forecastOnly | reactive"),
    ("model", "lstm", "prophet | seasonal_naive | naive | linear_trend | auto | envelope | mstl | ets"),
    ("quantile", "1", "strictly between 0 and 1"),
    ("quantile", "0", "strictly between 0 and 1"),
    ("history", "14 days", "duration"),
    ("step", "0s", "at least 1s"),
    ("minHistory", "30d", "no longer than history"),
    ("refitInterval", "1s", "at least 10s"),
    ("headroom", "0.5", "[1, 100]"),
    ("headroom", "1e308", "[1, 100]"),  # gave a planned value of 0 with IsActive true
    ("refitInterval", "2d", "at most 1d"),
    ("step", "2h", "at most 1h"),
    ("history", "91d", "at most 90d"),
    ("refreshInterval", "0.5s", "at least 1s"),
    ("refreshInterval", "11m", "at most 10m"),
    ("maxCostRatio", "1e6", "(0, 1000]"),
    ("hpaTolerance", "1", "[0, 1)"),
    ("credentials", "../etc", "name of a credential set"),
    ("metricName", "Bad Name!", "metric name"),
])
def test_bad_metadata_names_key_value_and_accepted_form(key, value, accepted):
    with pytest.raises(MetadataError) as e:
        parse(**{key: value})
    msg = str(e.value)
    assert f"'{key}'" in msg
    assert accepted in msg
    if "@" in (value or ""):  # a user:password is never echoed
        assert "hunter2" not in msg and "admin" not in msg and "<user:password hidden>@prom:9090" in msg
    else:
        assert ("missing" in msg) if value is None else (repr(value) in msg)
    assert accepted in msg
    assert e.value.key == key


def test_missing_qps_per_replica_mentions_the_alias():
    with pytest.raises(MetadataError, match="'qpsPerReplica': got missing.*alias 'threshold'"):
        parse(qpsPerReplica=None)


def test_secret_headers_are_not_echoed():
    with pytest.raises(MetadataError) as e:
        parse(customHeaders="Authorization Bearer s3cr3t")
    assert "s3cr3t" not in str(e.value) and "customHeaders" in str(e.value)
    spec, _ = parse(customHeaders="X-Scope-OrgID=tenant1,Authorization=Bearer s3cr3t")
    assert dict(spec.prometheus.custom_headers)["X-Scope-OrgID"] == "tenant1"
    assert "s3cr3t" not in repr(spec)


def test_unknown_keys_are_reported_not_fatal():
    spec, unknown = parse(scalerAddress="forescale.keda:6000", qpsPerReplicas="3", foo="bar")
    assert unknown == ("foo", "qpsPerReplicas")
    assert spec.qps_per_replica == 10


def test_timeout_in_milliseconds_like_keda():
    assert parse(timeout="250")[0].prometheus.timeout_seconds == 0.25
    assert parse(timeout="2s")[0].prometheus.timeout_seconds == 2.0


def test_metric_name_is_lower_cased():
    assert parse(metricName="LLM-QPS")[0].metric_name == "llm-qps"


def test_the_generated_reference_documents_exactly_the_parsed_keys():
    """No drift: the generated reference's metadata table lists every key of KEYS, with its default."""
    ref = (REPO / "docs" / "reference.md").read_text()
    section = ref.split("## Trigger metadata", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([A-Za-z]+)` \| ([^|]*) \|", section, flags=re.M))
    assert set(rows) == {k.name for k in KEYS}
    for k in KEYS:
        shown = rows[k.name].strip().strip("`")
        if k.default not in (None, ""):
            assert shown == k.default, f"reference default of {k.name} is {shown!r}, code has {k.default!r}"


# ----------------------------------------------------------------------------- spec -> metadata

VALID = {  # a few accepted values per key (parse_metadata's forms, not only the canonical ones)
    "activationThreshold": ["0", "0.5", "3"],
    "ignoreNullValues": ["true", "false", "no"],
    "queryParameters": ["", "dedup=true", "a=1,b=2"],
    "customHeaders": ["", "X-Scope-OrgID=team-a"],
    "unsafeSsl": ["false", "true"],
    "timeout": ["5000", "2s", "750", "1.5"],
    "credentials": ["", "prom-reader"],
    "metricName": ["", "llm-qps"],
    "coldStartSeconds": ["180", "42.5", "0"],
    "coldStartQuery": ["", "max(forescale_cold_start_seconds)"],
    "bufferSeconds": ["", "0", "45"],
    "forecastErrorSeconds": ["30", "10"],
    "mode": ["forecastAndScale", "forecastOnly", "reactive", "REACTIVE"],
    "model": ["prophet", "naive", "linear_trend", "seasonal_naive", "auto"],
    "levelCorrection": ["4h", "0", "90s", "1h30m"],
    "quantile": ["0.9", "0.5", "0.123456789"],
    "history": ["14d", "2w", "36h"],
    "step": ["60s", "30", "5m"],
    "refitInterval": ["30m", "10", "1h"],
    "minHistory": ["1d", "0", "6h"],
    "headroom": ["1.0", "1.1", "1"],
    "hpaTolerance": ["0.1", "0", "0.05"],
    "tuning": ["off", "auto"],
    "targetMiss": ["0.005", "0.02"],
    "maxCostRatio": ["", "1.3"],
    "tuningInterval": ["24h", "10m"],
}


def test_to_metadata_reads_back_as_the_same_spec_over_random_valid_triggers():
    """parse_metadata(to_metadata(spec)) == spec, with defaults left out and with every key written."""
    rng = random.Random(7)
    for _ in range(300):
        md = {"serverAddress": "http://prometheus.monitoring:9090", "query": "sum(rate(x[2m]))",
              "qpsPerReplica": rng.choice(["4", "0.25", "12.5"])}
        for key, values in VALID.items():
            if rng.random() < 0.5:
                md[key] = rng.choice(values)
        spec, _ = parse_metadata(md, name="llm", namespace="serving")
        short = to_metadata(spec, name="llm", namespace="serving")
        assert parse_metadata(short, name="llm", namespace="serving")[0] == spec, md
        full = to_metadata(spec, name="llm", namespace="serving", defaults=True)
        assert parse_metadata(full, name="llm", namespace="serving")[0] == spec, md
        assert set(short) <= set(full) and all(isinstance(v, str) for v in full.values())


def test_to_metadata_leaves_out_exactly_the_defaults():
    md = {"serverAddress": "http://p:9090", "query": "q", "qpsPerReplica": "4", "quantile": "0.8", "history": "14d",
          "headroom": "1", "timeout": "2s", "model": "naive"}
    spec, _ = parse_metadata(md)
    # quantile 0.8, history 14d and headroom 1 are the documented defaults (DEFAULTS); timeout 2 s = 2000 ms;
    # tuning: off is implied by the explicit model, so it is not written either
    assert to_metadata(spec) == {"serverAddress": "http://p:9090", "query": "q", "qpsPerReplica": "4",
                                 "timeout": "2000", "model": "naive"}
    assert DEFAULTS["quantile"] == "0.8" and DEFAULTS["history"] == "14d"


@pytest.mark.parametrize("keys,tuning", [
    ({}, "auto"),  # a user who sets nothing gets a tuned policy
    ({"model": "prophet"}, "off"),  # any of the keys tuning replaces, set: the user's own policy is kept
    ({"headroom": "1.2"}, "off"),
    ({"quantile": "0.9", "tuning": "auto"}, "auto"),  # unless tuning is asked for explicitly
    ({"tuning": "off"}, "off"),
    ({"coldStartSeconds": "120"}, "auto"),  # keys tuning does not replace leave the default alone
])
def test_tuning_is_on_unless_the_user_set_the_policy(keys, tuning):
    assert parse(**keys)[0].tuning == tuning


def test_target_miss_is_a_fraction_or_a_multiple_of_reactive():
    assert parse(targetMiss="0.005")[0].target_miss == MissTarget(0.005, False)
    assert parse(targetMiss=" 0.2X ")[0].target_miss == MissTarget(0.2, True)
    # a relative target resolves against reactive's miss: 0.5 x 2.54 % = 1.27 %
    assert MissTarget(0.5, True).absolute(0.0254) == pytest.approx(0.0127)
    assert MissTarget(0.005, False).absolute(0.0254) == 0.005
    for bad in ("1", "1.5x", "-0.1", "abc", "x", "nanx"):
        with pytest.raises(MetadataError, match="targetMiss.*a multiple of reactive KEDA's missed fraction"):
            parse(targetMiss=bad)
    assert parse(maxCostRatio="none")[0].max_cost_ratio is None
    with pytest.raises(MetadataError, match="maxCostRatio.*or none"):
        parse(maxCostRatio="0")


def test_tuning_min_history_is_at_most_the_history():
    # the default 7d shrinks to a shorter history; an explicit longer value is refused
    assert parse(history="3d")[0].tuning_min_history_seconds == 3 * 86400
    assert parse(tuningMinHistory="2d")[0].tuning_min_history_seconds == 2 * 86400
    with pytest.raises(MetadataError, match="tuningMinHistory.*no longer than history"):
        parse(history="3d", tuningMinHistory="4d")
    with pytest.raises(MetadataError, match="tuningMinHistory.*at least 4h"):
        parse(tuningMinHistory="1h")


@pytest.mark.parametrize("over,limit,shown", [
    ({"query": "x" * (1 << 20)}, "MAX_VALUE_BYTES", "a value of 1048576 bytes"),
    ({f"k{i}": "v" for i in range(70)}, "MAX_METADATA_KEYS", "73 keys"),  # 70 + the 3 of parse()'s base map
    ({f"k{i}": "v" * 8000 for i in range(5)}, "MAX_METADATA_BYTES", "bytes"),
    ({"k" * 300: "v"}, "MAX_KEY_BYTES", "a key name of 300 bytes"),
])
def test_metadata_over_a_size_limit_names_the_limit_and_echoes_no_value(over, limit, shown):
    with pytest.raises(MetadataError) as e:
        parse(**over)
    msg = str(e.value)
    assert limit in msg and shown in msg
    assert len(msg) < 400  # never the value itself


def test_a_lead_or_horizon_past_its_cap_is_refused():
    # L = 86400 (coldStartSeconds) + 60 + 15 + 30 (buffer parts) > MAX_LEAD_SECONDS = 86400
    with pytest.raises(MetadataError, match="MAX_LEAD_SECONDS"):
        parse(coldStartSeconds="86400")
    # step 1s, refitInterval 1d: 2 x 86400 + 285 = 173085 steps > MAX_HORIZON_STEPS = 50000
    with pytest.raises(MetadataError, match="MAX_HORIZON_STEPS"):
        parse(step="1s", history="1d", minHistory="1h", refitInterval="1d")
    # history 14d at step 10s = 120960 steps > MAX_HISTORY_STEPS = 100000
    with pytest.raises(MetadataError, match="MAX_HISTORY_STEPS"):
        parse(step="10s", history="14d")
    assert parse(refreshInterval="30s")[0].refresh_seconds == 30.0


def test_holiday_and_event_keys():
    spec = parse(holidays="us-ca", holidayWindow="1", holidayAs="Sat", eventsFile="/etc/forescale/events.csv")[0]
    assert (spec.holidays, spec.holiday_window, spec.holiday_as, spec.events_file) == ("US-CA", 1, 5,
                                                                                        "/etc/forescale/events.csv")
    assert parse()[0].holidays == "" and parse()[0].holiday_as == LEARNED  # off; learned
    assert parse(holidays="US")[0].forecast_key() != parse()[0].forecast_key()  # a change refits
    for key, value, word in (("holidays", "XX", "country code"), ("holidayWindow", "9", "\\[0, 7\\]"),
                             ("holidayAs", "someday", "weekday name"), ("eventsFile", "events.csv", "absolute path"),
                             ("timezone", "Mars/Olympus", "IANA time zone name"), ("timezone", "../etc/passwd", "IANA")):
        with pytest.raises(MetadataError, match=word):
            parse(**{key: value})


def test_timezone_key():
    assert parse()[0].timezone == "UTC" == DEFAULTS["timezone"]
    spec = parse(holidays="US", timezone="America/New_York")[0]
    assert spec.timezone == "America/New_York" and to_metadata(spec)["timezone"] == "America/New_York"
    assert spec.forecast_key() != parse(holidays="US")[0].forecast_key()  # another zone's days: refit


# -- control characters (issue 36, item 3; issue 40, item 1) ------------------------------------------------------
CONTROLS = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))]


@pytest.mark.parametrize("key", sorted(k.name for k in KEYS))
def test_a_control_character_is_refused_in_every_key(key):
    """Any C0, DEL or C1 character anywhere in any key's value: INVALID_ARGUMENT naming the key and the character
    (tab, newline and carriage return excepted in the two PromQL keys, where they are spaces)."""
    from hypothesis import given, settings, strategies as st

    promql = key in ("query", "coldStartQuery")
    allowed = ("\t", "\n", "\r") if promql else ()

    @settings(max_examples=25, derandomize=True, deadline=None)
    @given(st.sampled_from([c for c in CONTROLS if c not in allowed]), st.text("ab=,/0", max_size=8),
           st.text("ab=,/0", max_size=8))
    def check(ch, before, after):
        with pytest.raises(MetadataError) as e:
            parse(**{key: before + ch + after})
        msg = str(e.value)
        assert f"metadata key '{key}'" in msg and f"found U+{ord(ch):04X} at character {len(before) + 1}" in msg
        assert ch not in msg  # the value is shown escaped (or redacted), never as it is
        if key == "customHeaders":
            assert "<redacted>" in msg

    check()


def test_promql_keys_read_tab_newline_and_carriage_return_as_spaces():
    spec, _ = parse(query="sum(\n  rate(x[2m])\r\n)\t", coldStartQuery="max(\n t_cold)")
    assert spec.query == "sum(   rate(x[2m])  )" and spec.cold_start_query == "max(  t_cold)"
    with pytest.raises(MetadataError, match=re.escape("found U+001B at character 4")):
        parse(query="sum\x1b[31m(x)")
