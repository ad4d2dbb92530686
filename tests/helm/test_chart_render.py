"""The chart lints, renders with every option, and every manifest is valid Kubernetes."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from tests.helm.chart import CHART, CRD_KINDS, Rendered, render, validate

# Oldest and newest Kubernetes minor versions the chart is checked against.
KUBE_VERSIONS = ("1.29.0", "1.33.0")

EVERYTHING_ON: dict[str, Any] = {
    "ingress": {
        "enabled": True,
        "className": "nginx",
        "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
        "tls": [{"secretName": "skyroute-tls", "hosts": ["skyroute.example.com"]}],
    },
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}},
    "cloud": {
        "aws": {"region": "us-east-1", "accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "s3cr3t"},
        "gcp": {"project": "p", "credentialsJson": '{"type": "service_account"}'},
        "azure": {"subscriptionId": "sub", "tenantId": "t", "clientId": "c", "clientSecret": "x"},
    },
    "redis": {"persistence": {"enabled": True, "storageClass": "gp3"}},
    "autoscaling": {"targetMemoryUtilizationPercentage": 80},
    "podDisruptionBudget": {"maxUnavailable": 1},
    "networkPolicy": {"ingressFrom": [{"namespaceSelector": {"matchLabels": {"team": "ml"}}}]},
}
EXTERNAL_REDIS: dict[str, Any] = {
    "redis": {"enabled": False},
    "externalRedis": {"url": "rediss://:pw@redis.example.internal:6380/0"},
    "autoscaling": {"enabled": False},
    "autoscaler": {"enabled": False},
    "networkPolicy": {"externalRedisTo": [{"ipBlock": {"cidr": "10.20.0.0/16"}}]},
}
WORKLOAD_IDENTITY: dict[str, Any] = {
    "cloud": {
        "aws": {"roleArn": "arn:aws:iam::123456789012:role/skyroute-autoscaler"},
        "gcp": {"serviceAccount": "skyroute@my-project.iam.gserviceaccount.com"},
        "azure": {"workloadIdentity": True, "clientId": "00000000-1111", "tenantId": "tttt"},
    }
}
VALUE_SETS = {
    "defaults": {},
    "everything-on": EVERYTHING_ON,
    "external-redis": EXTERNAL_REDIS,
    "workload-identity": WORKLOAD_IDENTITY,
}


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def rendered(request: pytest.FixtureRequest) -> Rendered:
    return render(VALUE_SETS[request.param])


def test_chart_lints_without_warnings() -> None:
    report = helm.lint(CHART, strict=True, kube_version="v1.30.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, report


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_rendered_manifest_is_valid_against_the_kubernetes_schemas(
    rendered: Rendered, kube_version: str
) -> None:
    for doc in rendered.docs:
        if doc["kind"] in CRD_KINDS:
            continue
        validate(doc, kube_version)


def test_only_custom_resources_lack_a_kubernetes_schema() -> None:
    kinds = {d["kind"] for d in render(EVERYTHING_ON).docs}
    assert kinds & CRD_KINDS == {"ServiceMonitor"}
    assert {"Deployment", "StatefulSet", "Service", "Ingress", "ConfigMap", "Secret",
            "ServiceAccount", "HorizontalPodAutoscaler", "PodDisruptionBudget",
            "NetworkPolicy"} <= kinds  # fmt: skip


def test_every_resource_carries_the_common_labels(rendered: Rendered) -> None:
    for doc in rendered.docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "sr", doc["metadata"]["name"]
        assert labels["app.kubernetes.io/name"] == "skyroute"
        assert labels["helm.sh/chart"] == "skyroute-0.1.0"
        assert doc["metadata"]["name"].startswith("sr-skyroute")


def test_notes_show_how_to_call_the_endpoint() -> None:
    notes = render().notes
    assert "kubectl port-forward --namespace llm svc/sr-skyroute 8080:80" in notes
    assert "curl -s http://127.0.0.1:8080/v1/chat/completions" in notes
    assert "Authorization: Bearer $SKYROUTE_API_KEY" in notes
    assert "sr-skyroute-auth" in notes


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"gateway": {"replicaCount": 0}}, "/gateway/replicaCount"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        (
            {"securityContext": {"readOnlyRootFilesystem": False}},
            "/securityContext/readOnlyRootFilesystem",
        ),
        ({"podSecurityContext": {"runAsNonRoot": False}}, "/podSecurityContext/runAsNonRoot"),
        (
            {"gateway": {"config": {"snapshotIntervalMs": 1000}}},
            "/gateway/config/snapshotIntervalMs",
        ),
        ({"gateway": {"config": {"logLevel": "LOUD"}}}, "/gateway/config/logLevel"),
        (
            {"gateway": {"resources": {"limits": {"memory": "lots"}}}},
            "/gateway/resources/limits/memory",
        ),
        ({"autoscaler": {"resources": {"limits": None}}}, "/autoscaler/resources"),
        ({"externalRedis": {"url": "http://redis:6379"}}, "/externalRedis/url"),
        ({"cloud": {"aws": {"roleArn": "my-role"}}}, "/cloud/aws/roleArn"),
        ({"auth": {"apiKey": "short"}}, "/auth/apiKey"),
        ({"gatway": {"replicaCount": 3}}, "additional properties 'gatway'"),
    ],
)
def test_values_schema_rejects_bad_values(values: dict[str, Any], where: str) -> None:
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError) as err:
        chart.validate_schema(values)
    assert where in str(err.value)
    with pytest.raises(helm.HelmValuesError):  # install/template refuse them too
        render(values)


def test_values_schema_accepts_the_defaults_and_every_tested_value_set() -> None:
    with helm.Chart.load(CHART) as chart:
        for values in VALUE_SETS.values():
            chart.validate_schema(values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"redis": {"enabled": False}}, "set externalRedis.url or externalRedis.existingSecret"),
        ({"externalRedis": {"url": "redis://r:6379/0"}}, "choose one"),
        ({"autoscaling": {"minReplicas": 5, "maxReplicas": 3}}, "must not exceed"),
        ({"gateway": {"terminationGracePeriodSeconds": 30}}, "must exceed"),
    ],
)
def test_contradictory_values_fail_the_render_with_a_reason(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render(values)
