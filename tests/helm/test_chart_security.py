"""Security by default: every workload the chart renders is locked down."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helm.chart import Rendered, containers, render
from tests.helm.test_chart_render import EVERYTHING_ON


@pytest.fixture(scope="module", params=["defaults", "everything-on"])
def rendered(request: pytest.FixtureRequest) -> Rendered:
    return render({} if request.param == "defaults" else EVERYTHING_ON)


def workloads(r: Rendered) -> list[dict[str, Any]]:
    found = r.of_kind("Deployment") + r.of_kind("StatefulSet")
    assert {w["metadata"]["labels"]["app.kubernetes.io/component"] for w in found} == {
        "gateway",
        "redis",
    }
    return found


def test_pods_run_as_non_root_with_runtime_default_seccomp(rendered: Rendered) -> None:
    for w in workloads(rendered):
        pod = w["spec"]["template"]["spec"]["securityContext"]
        assert pod["runAsNonRoot"] is True
        assert pod["runAsUser"] > 0
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}


def test_every_container_is_read_only_unprivileged_and_drops_all_capabilities(
    rendered: Rendered,
) -> None:
    for w in workloads(rendered):
        for c in containers(w):
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["allowPrivilegeEscalation"] is False, c["name"]
            assert sc["privileged"] is False, c["name"]
            assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, c["name"]


def test_every_container_has_a_writable_tmp_on_its_own_bounded_empty_dir(
    rendered: Rendered,
) -> None:
    for w in workloads(rendered):
        volumes = {v["name"]: v for v in w["spec"]["template"]["spec"]["volumes"]}
        tmp_volumes = []
        for c in containers(w):
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            assert "/tmp" in mounts, c["name"]
            tmp_volumes.append(mounts["/tmp"])
            assert volumes[mounts["/tmp"]]["emptyDir"]["sizeLimit"], c["name"]
        assert len(set(tmp_volumes)) == len(tmp_volumes), "containers share a /tmp"


def test_every_container_has_resource_requests_and_limits(rendered: Rendered) -> None:
    for w in workloads(rendered):
        for c in containers(w):
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]), c["name"]
            assert {"cpu", "memory"} <= set(c["resources"]["limits"]), c["name"]


def test_pods_do_not_mount_the_kubernetes_api_token(rendered: Rendered) -> None:
    for w in workloads(rendered):
        assert w["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert rendered.one("ServiceAccount")["automountServiceAccountToken"] is False


def test_credentials_come_from_secrets_never_from_literal_env_values(rendered: Rendered) -> None:
    secret_env = {"SKYROUTE_API_KEY", "SKYROUTE_ADMIN_TOKEN", "SKYROUTE_REDIS_PASSWORD",
                  "REDIS_PASSWORD", "REDISCLI_AUTH", "AWS_ACCESS_KEY_ID",
                  "AWS_SECRET_ACCESS_KEY", "AZURE_CLIENT_SECRET"}  # fmt: skip
    seen = set()
    for w in workloads(rendered):
        for c in containers(w):
            for e in c.get("env", []):
                if e["name"] in secret_env:
                    seen.add(e["name"])
                    assert "value" not in e, e
                    assert e["valueFrom"]["secretKeyRef"]["name"], e
    assert {"SKYROUTE_API_KEY", "SKYROUTE_ADMIN_TOKEN", "REDIS_PASSWORD"} <= seen


def test_generated_credentials_are_long_random_and_distinct() -> None:
    first, second = render(), render()
    data = first.one("Secret", "sr-skyroute-auth")["data"]
    assert data["api-key"] != data["admin-token"]
    again = second.one("Secret", "sr-skyroute-auth")["data"]
    assert again["api-key"] != data["api-key"], "not random"
    import base64  # noqa: PLC0415

    assert len(base64.b64decode(data["api-key"])) == 40
