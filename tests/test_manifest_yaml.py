"""The manifest loader (``scaler.manifest_yaml``): bounded before any object is built, in check and backtest
alike (issue 36 item 11), and a faithful reader of the YAML KEDA users write."""

from __future__ import annotations

import re
import tracemalloc

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from scaler.cli import main
from scaler.manifest_yaml import MAX_DEPTH, MAX_MANIFEST_BYTES, MAX_NODES, YamlError, load_all
from support.manifests import as_yaml, scaled_object
from support.traces import write_daily

KEYS = st.text("abcdefgh", min_size=1, max_size=5)
SCALARS = st.none() | st.booleans() | st.integers(-10 ** 6, 10 ** 6) | st.floats(allow_nan=False, allow_infinity=False,
                                                                                   width=32) | st.text(max_size=12)
TREES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                     max_leaves=12)

# the classic: 9 levels of 9 aliases, a billion "lol"s from 800 bytes
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))


def so(name: str = "llm") -> str:
    return as_yaml(scaled_object(name))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(TREES)
def test_what_a_user_writes_reads_back_as_written(tree):
    # every JSON-like document, dumped without anchors, is read back equal (timestamps stay strings: KEDA's)
    assert load_all(yaml.safe_dump(tree)) == [tree]
    assert load_all("2024-01-01\n") == ["2024-01-01"] and load_all("{5: x, true: y}") == [{"5": "x", "true": "y"}]


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(TREES, min_size=1, max_size=3).map(lambda xs: [{"shared": xs[0]}] + xs), st.data())
def test_an_anchor_or_alias_anywhere_is_refused_naming_its_line(trees, data):
    shared = trees[0]["shared"]
    # the same object twice: yaml.safe_dump writes an anchor (&id001) and an alias (*id001)
    doc = {"first": shared, "again": [shared], "n": data.draw(st.integers(0, 3))}
    if not isinstance(shared, (list, dict)):
        doc = {"first": trees, "again": trees}
    text = yaml.safe_dump(doc)
    assert "&id001" in text
    with pytest.raises(YamlError) as e:
        load_all(text)
    line = 1 + next(i for i, ln in enumerate(text.splitlines()) if "&id001" in ln)
    assert f"line {line}: YAML anchor '&id001': anchors and aliases are refused in manifests" in str(e.value)
    with pytest.raises(YamlError, match=r"line 2: YAML alias '\*x'"):
        load_all("a: 1\nb: *x\n")  # an alias without its anchor is refused the same way, before PyYAML's error


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.dictionaries(KEYS, TREES, min_size=1, max_size=4), st.data())
def test_a_repeated_key_in_any_mapping_is_refused_naming_both_lines(tree, data):
    lines = yaml.safe_dump(tree, default_flow_style=False).splitlines()
    keyed = [i for i, ln in enumerate(lines) if re.match(r"^ *[a-h]+:( |$)", ln)]
    i = data.draw(st.sampled_from(keyed))
    text = "\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:]) + "\n"
    key = lines[i].split(":")[0].strip()
    with pytest.raises(YamlError) as e:
        load_all(text)
    assert f"line {i + 2}: key {key!r} appears twice in one mapping (first at line {i + 1})" in str(e.value)


def test_the_bounds_hold_before_objects_are_built():
    tracemalloc.start()
    try:
        for text, said in ((LAUGHS, "YAML anchor '&a'"),
                           ("[" * 200 + "]" * 200, f"nested deeper than {MAX_DEPTH} levels"),
                           ("[" * 10_000 + "]" * 10_000, "not valid YAML (exceeded maximum nesting depth)"),
                           ("k: [" + ",".join(["0"] * (MAX_NODES + 10)) + "]\n", f"more than {MAX_NODES:,} YAML values"),
                           ("<<: {a: 1}\n", "YAML merge key '<<'"),
                           ("x" * (MAX_MANIFEST_BYTES + 1), "larger than 4 MiB")):
            tracemalloc.reset_peak()
            with pytest.raises(YamlError, match=re.escape(said)):
                load_all(text)
            # MAX_NODES values at ~400 bytes a node before the limit; the bombs far less
            assert tracemalloc.get_traced_memory()[1] < 96 * 2 ** 20, said
    finally:
        tracemalloc.stop()
    # just under the bounds: read
    assert len(load_all("k: [" + ",".join(["0"] * (MAX_NODES - 10)) + "]\n")[0]["k"]) == MAX_NODES - 10
    assert load_all("[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1))


NAMED = so().replace("  - type: external\n", "  - type: external\n    name: *i\n")


@pytest.mark.parametrize("text", [
    LAUGHS + "---\n" + so(),  # a bomb beside a ScaledObject
    "bombs:\n" + "".join("  " + ln + "\n" for ln in LAUGHS.splitlines()) + NAMED,  # a trigger named by the bomb
    so() + "---\n" + NAMED,  # an alias whose anchor is in no document (anchors do not cross documents)
])
def test_check_and_backtest_refuse_an_alias_bomb_quickly_and_in_bounded_memory(tmp_path, text):
    f = tmp_path / "bomb.yaml"
    f.write_text(text)
    csv = write_daily(tmp_path / "daily.csv", 1.5)
    tracemalloc.start()
    try:
        r = CliRunner().invoke(main, ["check", str(f)], catch_exceptions=False)
        b = CliRunner().invoke(main, ["backtest", str(csv), "--model", "naive", "--span", "6h", "--history", "1d",
                                      "--no-progress", "--scaledobject", str(f)], catch_exceptions=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    for res in (r, b):
        assert res.exit_code == 2 and "Traceback" not in res.output
        assert "anchors and aliases are refused in manifests" in res.output
    assert peak < 256 * 2 ** 20  # the backtest's own trace and imports; the bomb itself is never expanded
