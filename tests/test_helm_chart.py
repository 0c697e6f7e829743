"""The Helm chart as GitOps users and a fresh cluster meet it (issue 36 items 16-19): the default certificates are
the same on every render, the chart refuses a cluster without KEDA or cert-manager with a message that says what to
install first, values.schema.json refuses bad values naming them, and what ``forescale tune`` prints uses the
chart's mTLS. Rendered by Helm's own engine (``support.helm``)."""

from __future__ import annotations

import re

import pytest
import yaml
from click.testing import CliRunner

from scaler.cli import main
from support.helm import CHART, CLUSTER_APIS, helm, render, render_files
from support.paths import REPO
from support.traces import write_daily

AGGREGATOR = "apiregistration.k8s.io/v1"  # every cluster serves it; Helm's offline set does not


def one(objs, kind: str, name: str) -> dict:
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_every_render_of_the_defaults_is_the_same():
    # Argo CD and Flux re-render on every sync: the default must not change between renders
    assert render_files() == render_files()
    assert render_files(api_versions=CLUSTER_APIS) == render_files(api_versions=CLUSTER_APIS)
    # tls.source chart (Helm's genCA, documented as for a plain helm install only) is not: the comparison can fail
    a, b = (render_files({"tls": {"source": "chart"}})["forescale/templates/tls-chart.yaml"] for _ in range(2))
    assert a != b


def test_the_default_certificates_are_one_chain_from_the_charts_own_ca():
    objs = render()
    issuer = {"kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert one(objs, "ClusterIssuer", "forescale-selfsigned")["spec"] == {"selfSigned": {}}
    ca = one(objs, "Certificate", "forescale-ca")
    assert ca["metadata"]["namespace"] == "cert-manager"  # where a CA ClusterIssuer reads its Secret
    assert ca["spec"]["isCA"] is True and ca["spec"]["issuerRef"] == {"name": "forescale-selfsigned", **issuer}
    assert one(objs, "ClusterIssuer", "forescale-ca")["spec"] == {"ca": {"secretName": ca["spec"]["secretName"]}}
    srv, cli = one(objs, "Certificate", "forescale-grpc"), one(objs, "Certificate", "forescale-keda-client")
    for leaf in (srv, cli):
        assert leaf["spec"]["issuerRef"] == {"name": "forescale-ca", **issuer}
    assert "server auth" in srv["spec"]["usages"] and "client auth" in cli["spec"]["usages"]
    assert set(srv["spec"]["dnsNames"]) >= {"forescale.forescale.svc", "forescale.forescale.svc.cluster.local"}
    # the Deployment mounts the server's Secret; KEDA's ClusterTriggerAuthentication reads the client's, in keda
    dep = one(objs, "Deployment", "forescale")
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert vols["grpc-tls"]["secret"]["secretName"] == srv["spec"]["secretName"]
    assert cli["metadata"]["namespace"] == "keda"
    cta = one(objs, "ClusterTriggerAuthentication", "forescale-mtls")
    assert {r["name"] for r in cta["spec"]["secretTargetRef"]} == {cli["spec"]["secretName"]}
    assert not [o for o in objs if o["kind"] == "Secret"]  # nothing random in the render
    # another release: every cluster-wide name follows its fullname
    other = render(name="scaler", namespace="ml")
    assert {o["metadata"]["name"] for o in other if o["kind"] == "ClusterIssuer"} == {"scaler-forescale-selfsigned",
                                                                                      "scaler-forescale-ca"}


KEDA_FIRST = ("KEDA is not installed in this cluster (no keda.sh/v1alpha1 API)",
              "Install KEDA first: helm repo add kedacore https://kedacore.github.io/charts && helm install keda "
              "kedacore/keda -n keda --create-namespace; then install forescale again")
CERT_MANAGER_FIRST = ("cert-manager is not installed in this cluster (no cert-manager.io/v1 API)",
                      "helm install cert-manager jetstack/cert-manager -n cert-manager --create-namespace "
                      "--set crds.enabled=true", "or --set tls.source=chart")


@pytest.mark.parametrize("apis, values, said", [
    ((AGGREGATOR,), {}, KEDA_FIRST),  # a bare cluster
    ((AGGREGATOR, "cert-manager.io/v1"), {}, KEDA_FIRST),
    ((AGGREGATOR, "cert-manager.io/v1"), {"tls": {"source": "chart"}}, KEDA_FIRST),  # the client Secret is KEDA's
    ((AGGREGATOR, "keda.sh/v1alpha1"), {}, CERT_MANAGER_FIRST),
    ((AGGREGATOR, "keda.sh/v1alpha1"), {"tls": {"source": "chart"}}, ()),
    ((AGGREGATOR,), {"tls": {"enabled": False}}, ()),  # the scaler alone installs without KEDA
    ((AGGREGATOR,), {"tls": {"source": "secret", "keda": {"clusterTriggerAuthentication": False}}}, ()),
    (CLUSTER_APIS, {}, ()),
    (None, {}, ()),  # offline (helm template, helm lint): everything renders
])
def test_the_chart_refuses_a_cluster_without_keda_or_cert_manager_saying_what_to_install(apis, values, said):
    if not said:
        objs = render(values, api_versions=apis)
        assert sorted(o["kind"] for o in objs) == sorted(o["kind"] for o in render(values))
        return
    with pytest.raises(helm().HelmRenderError) as e:
        render(values, api_versions=apis)
    for text in said:
        assert text in str(e.value)


@pytest.mark.parametrize("values, said", [
    ({"tls": {"source": "vault"}}, "at '/tls/source': value must be one of 'cert-manager', 'chart', 'secret'"),
    ({"serve": {"grpcPort": "abc"}}, "at '/serve/grpcPort': got string, want integer"),
    ({"serve": {"grpcPort": 70000}}, "at '/serve/grpcPort': maximum: got 70,000, want 65,535"),
    ({"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}}, "at '/podMonitor/enabled': value must be false"),
    ({"tls": {"sorce": "chart"}}, "at '/tls': additional properties 'sorce' not allowed"),
    ({"serve": {"logLevel": "verbose"}}, "at '/serve/logLevel': value must be one of 'debug', 'info', 'warning', 'error'"),
])
def test_values_schema_refuses_bad_values_naming_them(values, said):
    with pytest.raises(helm().HelmValuesError) as e:
        render(values)
    assert said in str(e.value)
    with pytest.raises(helm().HelmValuesError):  # helm install and upgrade validate the same way
        render(values, api_versions=CLUSTER_APIS)


FREE_FORM = ("podSecurityContext", "resources", "affinity", "networkPolicy.grpcFrom", "networkPolicy.metricsFrom",
             "networkPolicy.prometheus.to")


def _leaves(node, path=()):
    if isinstance(node, dict) and node and ".".join(path) not in FREE_FORM:
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    elif ".".join(path) not in FREE_FORM:
        yield path, node


def _set(path, value) -> dict:
    out: dict = {}
    node = out
    for k in path[:-1]:
        node = node.setdefault(k, {})
    node[path[-1]] = value
    return out


LEAVES = list(_leaves(yaml.safe_load((CHART / "values.yaml").read_text())))


@pytest.mark.parametrize("path, default", LEAVES, ids=[".".join(p) for p, _ in LEAVES])
def test_every_value_is_typed_and_every_mapping_closed_in_the_schema(path, default):
    # the rule, at every value of values.yaml: another JSON type is refused at its path; a misspelled key beside it
    # is refused as not allowed
    wrong = "x" if isinstance(default, (list, dict)) else [1]
    with pytest.raises(helm().HelmValuesError) as e:
        render(_set(path, wrong))
    assert f"at '/{'/'.join(path)}'" in str(e.value)
    if path[-2:-1] != ("labels",):  # labels: any key
        with pytest.raises(helm().HelmValuesError) as e:
            render(_set((*path[:-1], path[-1] + "Typo"), default))
        assert f"additional properties '{path[-1]}Typo' not allowed" in str(e.value)
    render(_set(path, default))  # and the default itself passes


def test_the_quickstart_installs_cert_manager_and_keda_before_forescale():
    for doc in ("README.md", "docs/deploying.md"):
        lines = [ln for ln in (REPO / doc).read_text().splitlines() if re.match(r"\s*helm install ", ln)]
        first = {what: next(i for i, ln in enumerate(lines) if f"helm install {what} " in ln)
                 for what in ("cert-manager", "keda", "forescale")}
        assert first["cert-manager"] < first["keda"] < first["forescale"], (doc, lines)


def test_tunes_scaledobject_uses_the_charts_mtls_and_says_so(tmp_path):
    csv = write_daily(tmp_path / "daily.csv", days=2.5)
    r = CliRunner().invoke(main, ["tune", str(csv), "--model", "seasonal_naive", "--span", "1d", "--history", "1d",
                                  "--refit", "2h", "--qps-per-replica", "10", "--jobs", "1", "--no-progress",
                                  "--target-miss", "0.05"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    block = r.stdout[r.stdout.index("# forescale tune"):].split("\n\n", 1)[0]
    (trigger,) = yaml.safe_load(block)["spec"]["triggers"]
    cta = one(render(), "ClusterTriggerAuthentication", "forescale-mtls")  # the chart's default release
    assert trigger["authenticationRef"] == {"name": cta["metadata"]["name"], "kind": "ClusterTriggerAuthentication"}
    assert trigger["metadata"]["scalerAddress"].startswith("forescale.forescale.svc")  # the same release
    assert "# authenticationRef forescale-mtls: the Helm chart's default mTLS" in block
    assert "drop it if the scaler runs without TLS" in block
    f = tmp_path / "so.yaml"
    f.write_text(block)
    c = CliRunner().invoke(main, ["check", str(f)], catch_exceptions=False)
    assert c.exit_code == 0 and c.stderr == "", c.output
