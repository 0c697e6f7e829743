"""``forescale backtest --queue-target/--ttft-target/--capacity-factor``: the closed loop and TTFT/ITL on the command
line (table, JSON), and bad input."""

from __future__ import annotations

import json

from support.backtest import AZURE as BUNDLED, AZURE_ARGS as ARGS, backtest as invoke


def test_the_closed_loop_replayed_from_the_command_line(tmp_path):
    docs = {}
    for name, extra in (("open", ()), ("closed", ("--queue-target", "2"))):
        out = tmp_path / f"{name}.json"
        r = invoke(str(BUNDLED), *ARGS, "--capacity-factor", "1.3", *extra, "--json", str(out))
        assert r.exit_code == 0, r.output
        docs[name] = (json.loads(out.read_text()), r.output)
    closed, text = docs["closed"]
    pol = closed["policies"]["reactive"]
    assert closed["settings"]["llm"]["loop"]["queue_target"] == 2.0 and closed["settings"]["llm"]["capacity_factor"] == 1.3
    assert pol["reasons"]["feedback"] > 0 and pol["ttft_p95_s"] > 0 and pol["itl_p95_s"] >= 0.02
    assert "TTFT p95 s" in text and "closed loop targets queue 2 per ready replica" in text
    assert any("capacity overstated x1.3" in n for n in closed["notes"])
    # the open loop (no target, no tokens): no TTFT/ITL keys, no loop; the loop ran more replicas and missed less
    opened = docs["open"][0]
    assert "ttft_p95_s" not in opened["policies"]["reactive"] and "llm" not in opened["settings"]
    assert pol["replica_hours"] > opened["policies"]["reactive"]["replica_hours"]
    assert pol["underprovisioned_fraction"] < opened["policies"]["reactive"]["underprovisioned_fraction"]


def test_bad_loop_options_are_refused_naming_the_option():
    for opt, value in (("--queue-target", "0"), ("--ttft-target", "nan"), ("--capacity-factor", "20"),
                       ("--itl-seconds", "0")):
        r = invoke(str(BUNDLED), *ARGS, opt, value)
        assert r.exit_code == 2 and opt in r.output, (opt, r.output)
