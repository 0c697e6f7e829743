"""tune's printed ScaledObject never carries the user:password of ``--prometheus``: the scaler refuses credentials in
``serverAddress`` (``specvalues.parse_server_address``), so a copied URL was a manifest the server turned away,
and a secret in a file meant for git. The printed serverAddress is the URL without them, with a note saying where
credentials go (docs/serving.md, Credentials). Real Prometheus (the session fixture), which ignores the basic auth it is sent.
"""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from scaler.cli import main
from scaler.cli.serveraddr import CREDENTIALS_NOTE, without_credentials

QUERY = 'sum(rate(forescale_requests_total{job="llm"}[2m]))'


def test_without_credentials_keeps_everything_else():
    assert without_credentials("http://u:pw@prom.monitoring:9090/prom?x=1") == "http://prom.monitoring:9090/prom?x=1"
    assert without_credentials("https://user@[::1]:9090") == "https://[::1]:9090"
    assert without_credentials("http://prom:9090") == "http://prom:9090"  # nothing to take out: the same text


def test_tunes_manifest_has_no_password_and_says_where_credentials_go(prometheus, tmp_path):
    host = prometheus.url.split("://", 1)[1]
    url = f"http://scaler:s3cretPW99@{host}"
    end = prometheus.end_at
    out, so = tmp_path / "t.json", tmp_path / "so.yaml"
    r = CliRunner().invoke(main, ["tune", "--prometheus", url, "--query", QUERY, "--start", str(end - 3 * 86400),
                                  "--end", str(end), "--model", "naive", "--span", "1d", "--history", "1d",
                                  "--refit", "2h", "--jobs", "1", "--no-progress", "--json", str(out), "-o", str(so)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "s3cretPW99" not in r.output and "s3cretPW99" not in so.read_text() and "s3cretPW99" not in out.read_text()
    doc = yaml.safe_load(so.read_text())
    assert doc["spec"]["triggers"][0]["metadata"]["serverAddress"] == prometheus.url
    assert f'serverAddress: "{prometheus.url}"  # {CREDENTIALS_NOTE}' in so.read_text()
    assert json.loads(out.read_text())["selection"]["metadata"]["serverAddress"] == prometheus.url
    chk = CliRunner().invoke(main, ["check", str(so)])
    assert chk.exit_code == 0, chk.output  # the server's own parser accepts what was printed
