"""The gateway Pod: sidecar, policy mount, identity, Redis wiring, scaling and network policy."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gateway.metrics import GatewayMetrics
from gateway.settings import GatewaySettings
from live.policy_file import load_policy
from tests.helm.chart import CHART, Rendered, env_of, render
from tests.helm.test_chart_render import EVERYTHING_ON, EXTERNAL_REDIS, WORKLOAD_IDENTITY


@pytest.fixture(scope="module")
def default() -> Rendered:
    return render()


def pod_spec(r: Rendered) -> dict[str, Any]:
    spec: dict[str, Any] = r.one("Deployment")["spec"]["template"]["spec"]
    return spec


def container(r: Rendered, name: str) -> dict[str, Any]:
    return next(c for c in pod_spec(r)["containers"] if c["name"] == name)


def test_the_autoscaler_sidecar_runs_in_the_gateway_pod_with_its_own_command(
    default: Rendered,
) -> None:
    names = [c["name"] for c in pod_spec(default)["containers"]]
    assert names == ["gateway", "autoscaler"]
    gw, sidecar = container(default, "gateway"), container(default, "autoscaler")
    assert gw["command"] == ["skyroute", "serve"]
    assert sidecar["command"] == ["skyroute", "autoscale"]
    assert gw["image"] == sidecar["image"] == "ghcr.io/skyroute/skyroute:0.1.0"


def test_the_sidecar_gets_redis_and_policy_but_not_the_client_or_admin_credentials(
    default: Rendered,
) -> None:
    gw, sidecar = env_of(container(default, "gateway")), env_of(container(default, "autoscaler"))
    for name in ("SKYROUTE_REDIS_URL", "SKYROUTE_POLICY", "SKYROUTE_REDIS_PREFIX"):
        assert sidecar[name] == gw[name]
    assert "SKYROUTE_API_KEY" in gw and "SKYROUTE_ADMIN_TOKEN" in gw
    assert "SKYROUTE_API_KEY" not in sidecar and "SKYROUTE_ADMIN_TOKEN" not in sidecar
    assert gw["SKYROUTE_HOST"]["value"] == "0.0.0.0"


def test_every_gateway_setting_is_set_from_the_chart_and_nothing_else(default: Rendered) -> None:
    wanted = {f"SKYROUTE_{name.upper()}" for name in GatewaySettings.model_fields}
    gw = {n for n in env_of(container(default, "gateway")) if n.startswith("SKYROUTE_")}
    # The password is only an input of SKYROUTE_REDIS_URL's $(VAR) expansion.
    assert gw - {"SKYROUTE_REDIS_PASSWORD"} == wanted


def test_env_values_parse_as_gateway_settings(default: Rendered) -> None:
    env = {
        name: e["value"]
        for name, e in env_of(container(default, "gateway")).items()
        if "value" in e and name != "SKYROUTE_REDIS_URL"
    }
    settings = GatewaySettings(**{
        name.removeprefix("SKYROUTE_").lower(): value for name, value in env.items()
        if name.removeprefix("SKYROUTE_").lower() in GatewaySettings.model_fields
    })  # fmt: skip
    assert settings.host == "0.0.0.0" and settings.port == 8080
    assert settings.max_body_bytes == 4 * 1024 * 1024
    assert (settings.drain_delay_s, settings.shutdown_timeout_s) == (5.0, 30)
    grace = pod_spec(default)["terminationGracePeriodSeconds"]
    assert grace > settings.drain_delay_s + settings.shutdown_timeout_s


def test_static_cloud_credentials_reach_only_the_sidecar() -> None:
    r = render(EVERYTHING_ON)
    gw, sidecar = env_of(container(r, "gateway")), env_of(container(r, "autoscaler"))
    cloud = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AZURE_CLIENT_SECRET",
             "GOOGLE_APPLICATION_CREDENTIALS"}  # fmt: skip
    assert cloud <= set(sidecar)
    assert not cloud & set(gw)
    secret = r.one("Secret", "sr-skyroute-cloud")
    assert set(secret["data"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                   "AZURE_CLIENT_SECRET", "gcp-credentials.json"}  # fmt: skip
    gcp_mount = next(
        m for m in container(r, "autoscaler")["volumeMounts"] if m["name"] == "cloud-credentials"
    )
    assert sidecar["GOOGLE_APPLICATION_CREDENTIALS"]["value"].startswith(gcp_mount["mountPath"])
    assert not any(
        m["name"] == "cloud-credentials" for m in container(r, "gateway")["volumeMounts"]
    )


def test_no_cloud_secret_without_static_credentials(default: Rendered) -> None:
    assert not [s for s in default.of_kind("Secret") if s["metadata"]["name"].endswith("-cloud")]


def test_the_policy_is_mounted_as_a_directory_so_configmap_updates_reach_the_gateway(
    default: Rendered,
) -> None:
    spec = pod_spec(default)
    volume = next(v for v in spec["volumes"] if v["name"] == "policy")
    assert volume["configMap"]["name"] == "sr-skyroute-policy"
    for c in spec["containers"]:
        mount = next(m for m in c["volumeMounts"] if m["name"] == "policy")
        assert "subPath" not in mount, "subPath mounts never see ConfigMap updates"
        assert mount["readOnly"] is True
        assert env_of(c)["SKYROUTE_POLICY"]["value"] == f"{mount['mountPath']}/policy.yaml"
    cm = default.one("ConfigMap", "sr-skyroute-policy")
    assert set(cm["data"]) == {"policy.yaml"}


def test_a_policy_change_does_not_restart_the_pods() -> None:
    fixed: dict[str, Any] = {
        "auth": {"apiKey": "sk-client-0123456789abcdef", "adminToken": "sk-admin-0123456789abcdef"},
        "redis": {"auth": {"password": "redis-0123456789abcdef"}},
    }
    before = render(fixed).one("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/auth" in before
    assert not [a for a in before if "policy" in a]
    fixed["policy"] = {"config": {"routing": {"max_attempts": 2}}}
    changed = render(fixed)
    assert (
        "max_attempts: 2" in changed.one("ConfigMap", "sr-skyroute-policy")["data"]["policy.yaml"]
    )
    after = changed.one("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert after == before
    fixed["auth"]["apiKey"] = "sk-client-rotated-0123456789"
    rotated = render(fixed).one("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert rotated["checksum/auth"] != before["checksum/auth"], "a new key must roll the Pods"


def test_the_default_policy_is_valid_for_the_gateway(default: Rendered, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(default.one("ConfigMap", "sr-skyroute-policy")["data"]["policy.yaml"])
    policy = load_policy(path)
    assert [p.id for p in policy.pools] == ["aws:us-east-1:l4-llama8b"]


def test_an_existing_policy_configmap_replaces_the_chart_one() -> None:
    r = render({"policy": {"existingConfigMap": "fleet-policy", "fileName": "fleet.yaml"}})
    assert not [c for c in r.of_kind("ConfigMap") if c["metadata"]["name"].endswith("-policy")]
    volume = next(v for v in pod_spec(r)["volumes"] if v["name"] == "policy")
    assert volume["configMap"]["name"] == "fleet-policy"
    assert env_of(container(r, "gateway"))["SKYROUTE_POLICY"]["value"].endswith("/fleet.yaml")


def test_built_in_redis_url_is_assembled_from_the_password_secret(default: Rendered) -> None:
    env = env_of(container(default, "gateway"))
    names = list(env)
    assert names.index("SKYROUTE_REDIS_PASSWORD") < names.index("SKYROUTE_REDIS_URL")
    assert env["SKYROUTE_REDIS_URL"]["value"] == (
        "redis://:$(SKYROUTE_REDIS_PASSWORD)@sr-skyroute-redis:6379/0"
    )
    redis = default.one("StatefulSet")
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["--requirepass", "$(REDIS_PASSWORD)"]
    assert default.one("Service", "sr-skyroute-redis")["spec"]["ports"][0]["port"] == 6379


def test_external_redis_url_comes_from_a_secret_and_no_redis_is_deployed() -> None:
    r = render(EXTERNAL_REDIS)
    assert not r.of_kind("StatefulSet")
    url = env_of(container(r, "gateway"))["SKYROUTE_REDIS_URL"]["valueFrom"]["secretKeyRef"]
    assert url == {"name": "sr-skyroute-redis", "key": "redis-url"}
    assert set(r.one("Secret", "sr-skyroute-redis")["data"]) == {"redis-url"}
    assert [c["name"] for c in pod_spec(r)["containers"]] == ["gateway"]
    assert r.one("Deployment")["spec"]["replicas"] == 2


def test_workload_identity_annotates_the_service_account_and_labels_the_pod() -> None:
    r = render(WORKLOAD_IDENTITY)
    sa = r.one("ServiceAccount")
    assert sa["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/skyroute-autoscaler",
        "iam.gke.io/gcp-service-account": "skyroute@my-project.iam.gserviceaccount.com",
        "azure.workload.identity/client-id": "00000000-1111",
        "azure.workload.identity/tenant-id": "tttt",
    }
    labels = r.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert labels["azure.workload.identity/use"] == "true"
    assert pod_spec(r)["serviceAccountName"] == sa["metadata"]["name"]
    sidecar = env_of(container(r, "autoscaler"))
    assert "AZURE_CLIENT_ID" not in sidecar, "the webhook injects it"
    assert not {"AWS_ACCESS_KEY_ID", "AZURE_CLIENT_SECRET"} & set(sidecar)


def test_the_hpa_scales_the_gateway_deployment_which_then_has_no_fixed_replicas(
    default: Rendered,
) -> None:
    hpa = default.one("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "sr-skyroute"
    }  # fmt: skip
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 10)
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert "replicas" not in default.one("Deployment")["spec"]


def test_the_pdb_covers_the_gateway_pods(default: Rendered) -> None:
    pdb = default.one("PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    selector = pdb["spec"]["selector"]["matchLabels"]
    pod_labels = default.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert selector["app.kubernetes.io/component"] == "gateway"


def test_network_policy_denies_everything_by_default_for_every_pod_of_the_release(
    default: Rendered,
) -> None:
    deny = default.one("NetworkPolicy", "sr-skyroute-default-deny")
    assert deny["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in deny["spec"] and "egress" not in deny["spec"]
    selector = deny["spec"]["podSelector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "skyroute", "app.kubernetes.io/instance": "sr"}
    for w in default.of_kind("Deployment") + default.of_kind("StatefulSet"):
        assert selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()


def test_gateway_network_policy_allows_only_its_port_dns_redis_and_https(
    default: Rendered,
) -> None:
    spec = default.one("NetworkPolicy", "sr-skyroute-gateway")["spec"]
    assert spec["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}]
    ports = [sorted((p["port"], p["protocol"]) for p in rule["ports"]) for rule in spec["egress"]]
    assert ports == [[(53, "TCP"), (53, "UDP")], [(6379, "TCP")], [(443, "TCP")]]
    redis_peer = spec["egress"][1]["to"][0]["podSelector"]["matchLabels"]
    assert redis_peer["app.kubernetes.io/component"] == "redis"
    redis_policy = default.one("NetworkPolicy", "sr-skyroute-redis")["spec"]
    assert redis_policy["policyTypes"] == ["Ingress"]
    (rule,) = redis_policy["ingress"]
    assert rule["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "gateway"
    )


def test_the_service_monitor_scrapes_metrics_with_the_admin_token() -> None:
    r = render(EVERYTHING_ON)
    (endpoint,) = r.one("ServiceMonitor")["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")
    assert endpoint["authorization"]["credentials"] == {
        "name": "sr-skyroute-auth", "key": "admin-token"
    }  # fmt: skip
    assert r.one("ServiceMonitor")["metadata"]["labels"]["release"] == "kps"


def test_the_dashboard_configmap_is_labelled_for_grafana_and_holds_valid_json(
    default: Rendered,
) -> None:
    cm = default.one("ConfigMap", "sr-skyroute-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["skyroute.json"])
    assert dashboard["uid"] == "skyroute-gateway"
    assert any(p["type"] == "timeseries" for p in dashboard["panels"])


def test_every_metric_the_dashboard_queries_is_one_the_gateway_exports() -> None:
    text = (CHART / "files" / "dashboards" / "skyroute.json").read_text()
    dashboard = json.loads(text)
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", []))
    queried = set(re.findall(r"\b(skyroute_[a-z_]+?)(?:_bucket)?\{", exprs))
    exported = {m.name for m in GatewayMetrics().registry.collect()}
    # prometheus_client names counters without the _total suffix.
    exported |= {f"{n}_total" for n in exported}
    assert queried <= exported, queried - exported
    assert {"skyroute_requests_total", "skyroute_request_duration_seconds",
            "skyroute_failovers_total", "skyroute_upstream_errors_total",
            "skyroute_inflight_requests", "skyroute_snapshot_age_seconds",
            "skyroute_redis_up", "skyroute_gateway_overhead_seconds"} <= queried  # fmt: skip


def test_ingress_routes_to_the_gateway_service_with_tls() -> None:
    r = render(EVERYTHING_ON)
    ingress = r.one("Ingress")
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "sr-skyroute", "port": {"name": "http"}}
    assert ingress["spec"]["tls"][0]["secretName"] == "skyroute-tls"
    assert ingress["metadata"]["annotations"]["cert-manager.io/cluster-issuer"] == "letsencrypt"


def test_the_store_worker_sidecar_takes_the_store_work_out_of_the_gateway(
    default: Rendered,
) -> None:
    assert env_of(container(default, "gateway"))["SKYROUTE_STORE_WORKER"]["value"] == "inline"
    r = render({"storeWorker": {"enabled": True}})
    assert [c["name"] for c in pod_spec(r)["containers"]] == [
        "gateway", "store-worker", "autoscaler"
    ]  # fmt: skip
    gw, worker = env_of(container(r, "gateway")), env_of(container(r, "store-worker"))
    assert gw["SKYROUTE_STORE_WORKER"]["value"] == "external"
    assert container(r, "store-worker")["command"] == ["skyroute", "store-worker"]
    for name in ("SKYROUTE_REDIS_URL", "SKYROUTE_REDIS_PREFIX", "SKYROUTE_DATABASE_URL"):
        assert worker[name] == gw[name]
    assert "SKYROUTE_API_KEY" not in worker and "SKYROUTE_ADMIN_TOKEN" not in worker
    # $(POD_NAME) expands only if POD_NAME comes first.
    names = list(worker)
    assert names.index("POD_NAME") < names.index("SKYROUTE_REPLICA_ID")
    # The default SQLite store is a file in the gateway's /tmp: the worker must see it.
    mounts = {m["name"]: m["mountPath"] for m in container(r, "store-worker")["volumeMounts"]}
    assert mounts == {"tmp": "/tmp"}
