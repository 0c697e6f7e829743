"""The drill's certificates and what it applies: checked with the cryptography package and by hand."""

from __future__ import annotations

import ipaddress

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from scaler.drill import manifests as mf
from scaler.drill.pki import CLIENTS, make_pki
from scaler.drill.procs import DrillError
from scaler.drill.scenarios import builtins, check_triggers, compress


def load(path):
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_every_leaf_is_signed_by_its_ca_with_the_names_and_usages_its_peer_checks(tmp_path):
    k = make_pki(tmp_path)
    ca, fp_ca = load(k.ca.cert), load(k.front_proxy_ca.cert)
    api = load(k.apiserver.cert)
    api.verify_directly_issued_by(ca)
    sans = api.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert "kubernetes.default.svc" in sans.get_values_for_type(x509.DNSName)
    assert ExtendedKeyUsageOID.SERVER_AUTH in api.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    for stem, (user, groups) in CLIENTS.items():
        c = load(k.clients[stem].cert)
        c.verify_directly_issued_by(ca)  # the apiserver's --client-ca-file
        assert c.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == user
        assert [a.value for a in c.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == list(groups)
    front = load(k.front_proxy_client.cert)
    front.verify_directly_issued_by(fp_ca)  # --requestheader-client-ca-file, not the cluster CA
    with pytest.raises(Exception):
        front.verify_directly_issued_by(ca)
    adapter = load(k.adapter_serving.cert)
    # the aggregator dials the ExternalName service and checks <service>.<namespace>.svc
    assert "keda-metrics-apiserver.keda.svc" in adapter.extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    grpc = load(k.keda_grpc_dir / "tls.crt")  # operator and adapter load the same files: both usages
    usages = grpc.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages and ExtendedKeyUsageOID.CLIENT_AUTH in usages
    grpc.verify_directly_issued_by(load(k.keda_grpc_dir / "ca.crt"))
    assert oct(k.clients["admin"].key.stat().st_mode & 0o777) == "0o600"


def test_compress_divides_every_period_keda_and_the_hpa_hold():
    sc = builtins()["behavior"]
    m = compress(sc.manifest, 5)
    spec = m["spec"]
    # 30 / 5 = 6, 300 / 5 = 60; initialCooldownPeriod's default 0 stays 0
    assert (spec["pollingInterval"], spec["cooldownPeriod"], spec["initialCooldownPeriod"]) == (6, 60, 0)
    beh = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    # windows 60 -> 12, 120 -> 24; periods 30 -> 6, 60 -> 12
    assert beh["scaleUp"]["stabilizationWindowSeconds"] == 12 and beh["scaleDown"]["stabilizationWindowSeconds"] == 24
    assert [p["periodSeconds"] for p in beh["scaleUp"]["policies"]] == [6, 6]
    assert [p["periodSeconds"] for p in beh["scaleDown"]["policies"]] == [6, 12]
    assert sc.manifest["spec"]["pollingInterval"] == 30  # the scenario's own manifest is left as it was
    # a scaleDown without a window gets the API's 300 s, compressed
    bare = {"spec": {"advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {"policies": []}}}}}}
    assert compress(bare, 5)["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"][
        "stabilizationWindowSeconds"] == 60


def test_a_period_that_k_does_not_divide_is_refused_naming_it():
    with pytest.raises(DrillError, match=r"spec\.pollingInterval: 7 s is not a whole number of seconds at k=5"):
        compress({"spec": {"pollingInterval": 7}}, 5)
    assert compress({"spec": {"pollingInterval": 7}}, 1)["spec"]["pollingInterval"] == 7


@pytest.mark.parametrize("trigger, says", [
    ({"type": "kafka", "metadata": {}}, "type 'kafka' has no source in the drill"),
    ({"type": "cron", "name": "c", "metadata": {}}, "cron follows the wall clock"),
    ({"type": "external", "metadata": {"coldStartFrom": "cluster"}}, "coldStartFrom/coldStartQuery"),
])
def test_a_trigger_without_a_source_is_refused(trigger, says):
    with pytest.raises(DrillError, match=says):
        check_triggers({"spec": {"triggers": [trigger]}})


def test_each_mode_points_at_the_drill_and_sets_use_cached_metrics():
    sc = builtins()["behavior"]
    live = mf.for_mode(sc, "live", scaler="127.0.0.1:1", prometheus="http://127.0.0.1:2")
    cached = mf.for_mode(sc, "cached", scaler="127.0.0.1:1", prometheus="http://127.0.0.1:2")
    assert live["metadata"]["name"] == "behavior-live" == live["spec"]["scaleTargetRef"]["name"]
    assert [t["useCachedMetrics"] for t in live["spec"]["triggers"]] == [False, False]
    assert [t["useCachedMetrics"] for t in cached["spec"]["triggers"]] == [True, True]
    fs, prom = live["spec"]["triggers"]
    assert fs["metadata"]["scalerAddress"] == "127.0.0.1:1" and fs["metadata"]["serverAddress"] == "http://127.0.0.1:2"
    assert fs["metadata"]["query"] == 'sum(rate(drill_requests_total{scenario="behavior"}[2m]))'
    assert prom["metadata"]["query"] == 'drill_observed_rate{scenario="behavior"}'
    # the pods are Ready T_cold / k after creation: 180 / 5 = 36 s
    dep = mf.deployment("behavior-live", 3, 180.0, 5.0)
    assert dep["spec"]["template"]["metadata"]["annotations"]["drill.forescale.dev/ready-after"] == "36.000s"


@pytest.mark.parametrize("addr, ok", [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True),
                                      ("::ffff:127.0.0.1", True), ("10.0.0.1", False), ("::ffff:8.8.8.8", False),
                                      ("fe80::1%lo", False), ("not-an-address", False)])
def test_only_loopback_counts_as_loopback(addr, ok):
    from scaler.drill.procs import loopback

    assert loopback(addr) is ok


def test_the_trace_becomes_a_counter_whose_rate_is_the_trace():
    import numpy as np

    from scaler.drill.prometheus import counter, openmetrics

    # two minutes at 10 req/s then one at 40: samples every 15 s from t = 0; the counter is linear inside each
    # interval: 150 requests by 15 s, 1200 by 120 s, 1200 + 40 x 30 = 2400 by 150 s
    ts, vs = counter(np.array([0.0, 60.0, 120.0]), np.array([10.0, 10.0, 40.0]), 60.0)
    assert ts.tolist() == [0.0, 15.0, 30.0, 45.0, 60.0, 75.0, 90.0, 105.0, 120.0, 135.0, 150.0, 165.0, 180.0]
    assert vs[1] == 150.0 and vs[8] == 1200.0 and vs[10] == 2400.0 and vs[-1] == 3600.0
    text = openmetrics({"s": (ts[:2], vs[:2])})
    assert text == ('# TYPE drill_requests counter\n# HELP drill_requests requests of the drill\'s trace\n'
                    'drill_requests_total{scenario="s"} 0.000000 0.000\n'
                    'drill_requests_total{scenario="s"} 150.000000 15.000\n# EOF\n')
