"""Every CSV the CLI is given goes through one reader (``cli.traces.text_file``): the trace, a fleet's
``tune --series-column`` CSV, ``backtest --trigger-series`` and ``--cold-starts`` alike. gzip without ``.gz`` and
UTF-16 with a byte-order mark read as the plain file; Latin-1 named with its line and byte and iconv; a missing file,
``/dev/null`` and an empty file named (before this, the fleet's reader said ``'utf-8' codec can't decode byte 0x8b
in position 1`` on a gzip'd file, a bare traceback-free but file-less message).
"""

from __future__ import annotations

import gzip

import pytest
from click.testing import CliRunner

from scaler.cli import main
from scaler.cli.fleetinput import read_fleet_csv
from scaler.cli.scaledobjects import load_series
from scaler.fleet.workloads import FleetError

FLEET = "timestamp,service,count\n" + "".join(f"{1_700_000_000 + 60 * i},{s},{10 + i}\n"
                                             for i in range(60) for s in ("a", "b"))


def forms(tmp_path, text: str) -> dict:
    """The same rows as plain UTF-8, gzip named .csv, UTF-16 with a BOM, UTF-8 with a BOM."""
    out = {}
    for name, data in (("plain", text.encode()), ("gzip", gzip.compress(text.encode())),
                       ("utf16", text.encode("utf-16")), ("bom", b"\xef\xbb\xbf" + text.encode())):
        p = tmp_path / f"{name}.csv"
        p.write_bytes(data)
        out[name] = p
    return out


def test_the_fleet_csv_reads_gzip_utf16_and_bom_as_the_plain_file(tmp_path):
    files = forms(tmp_path, FLEET)
    want = read_fleet_csv(files["plain"], "service")
    assert [w.key for w in want] == [(("service", "a"),), (("service", "b"),)]
    for name in ("gzip", "utf16", "bom"):
        got = read_fleet_csv(files[name], "service")
        assert [(w.key, list(w.series.y)) for w in got] == [(w.key, list(w.series.y)) for w in want], name


def test_the_fleet_csv_names_a_latin1_byte_and_what_is_no_file(tmp_path):
    p = tmp_path / "latin1.csv"
    p.write_bytes((FLEET.replace(",a,", ",caf\u00e9,", 1)).encode("latin-1"))
    with pytest.raises(FleetError) as e:
        read_fleet_csv(p, "service")
    # the first data row is line 2; "é" is the byte 0xe9 after the header (23 bytes and its newline) and
    # "1700000000,caf" (14): byte 38, 0-based
    assert f"{p}: line 2 is not UTF-8 (byte 0xe9 at byte {len('timestamp,service,count') + 1 + 14})" in str(e.value)
    assert "iconv" in str(e.value) and "codec can't decode" not in str(e.value)
    (tmp_path / "empty.csv").write_bytes(b"")
    for path, said in (("/dev/null", "is not a regular file"), (str(tmp_path / "empty.csv"), "is empty"),
                       (str(tmp_path / "missing.csv"), "does not exist")):
        with pytest.raises(FleetError) as e:
            read_fleet_csv(path, "service")
        assert f"--series-column CSV {path!r} {said}" in str(e.value)
        assert "expected a CSV with a header timestamp,service,count (or qps)" in str(e.value)


def test_tune_series_column_says_so_on_the_command_line(tmp_path):
    p = tmp_path / "f.csv"
    p.write_bytes(FLEET.encode("latin-1").replace(b",a,", b",\xe9,", 1))
    r = CliRunner().invoke(main, ["tune", str(p), "--series-column", "service", "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and f"{p}: line 2 is not UTF-8 (byte 0xe9" in r.output and "Traceback" not in r.output


def test_trigger_series_reads_gzip_and_utf16_and_names_latin1(tmp_path):
    text = "timestamp,value\n" + "".join(f"{1_700_000_000 + 60 * i},{i}.5\n" for i in range(5))
    files = forms(tmp_path, text)
    want = load_series((f"q={files['plain']}",))["q"]
    for name in ("gzip", "utf16", "bom"):
        got = load_series((f"q={files[name]}",))["q"]
        assert [list(x) for x in got] == [list(x) for x in want], name
    p = tmp_path / "bad.csv"
    p.write_bytes(b"timestamp,value\n1700000000,1\n1700000060,\xe9\n")
    r = CliRunner().invoke(main, ["backtest", "--trigger-series", f"q={p}", "--policies", "reactive"])
    # bytes 0-based: the header's 16, line 2's 13, "1700000060," 11: the 0xe9 is byte 40, on line 3
    assert r.exit_code == 2 and f"{p}: line 3 is not UTF-8 (byte 0xe9 at byte 40)" in r.output


def test_cold_starts_reads_gzip_without_its_suffix_and_names_a_missing_file(tmp_path):
    from scaler.cli.coldstarts import read_csv

    text = "pod,created,scheduled,started,ready\np1,100,110,120,300\np2,200,205,215,380\n"
    files = forms(tmp_path, text)
    want = read_csv(files["plain"])
    assert [(p.pod, p.ready) for p in want] == [("p1", 300.0), ("p2", 380.0)]
    for name in ("gzip", "utf16", "bom"):
        assert read_csv(files[name]) == want, name
    r = CliRunner().invoke(main, ["backtest", "--cold-starts", str(tmp_path / "none.csv"), "--policies", "reactive"])
    assert r.exit_code == 2 and f"--cold-starts {str(tmp_path / 'none.csv')!r} does not exist" in r.output
