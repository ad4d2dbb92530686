"""The AWS provider against moto, beyond the shared contract."""

from __future__ import annotations

import ipaddress

import pytest
from botocore.exceptions import ClientError

from adapters.cloud import AwsSettings, CloudConfig, NodeGroupSpec, create
from base.errors import AdapterError, Throttled
from tests.adapters.cloud.harness import AwsHarness

pytestmark = pytest.mark.parametrize("harness", ["aws"], indirect=True)


def _spec(name: str, max_size: int = 8) -> NodeGroupSpec:
    return NodeGroupSpec(f"aws:us-east-1:{name}", "aws", "us-east-1", name, 0, max_size)


def test_moto_alone_would_exceed_max_size(harness: AwsHarness) -> None:
    # Why the adapter must enforce max itself: moto accepts a desired capacity above MaxSize.
    harness.group(1)
    harness.moto.asg.set_desired_capacity(AutoScalingGroupName=harness.name, DesiredCapacity=3)
    harness.moto.asg.update_auto_scaling_group(AutoScalingGroupName=harness.name, MaxSize=2)
    harness.moto.asg.set_desired_capacity(AutoScalingGroupName=harness.name, DesiredCapacity=4)
    assert harness.moto.desired_capacity(harness.name) == 4


def test_the_asgs_own_max_size_applies_when_stricter_than_the_policy(harness: AwsHarness) -> None:
    harness.moto.create_asg("strict-max", size=2, max_size=2)
    with create(_spec("strict-max", max_size=8), harness.config) as group:
        with pytest.raises(AdapterError, match="max size 2"):
            group.increase_size(1)
        assert harness.moto.desired_capacity("strict-max") == 2


def test_nodes_carry_their_private_ip_address(harness: AwsHarness) -> None:
    nodes = harness.group(2).nodes()
    assert all(ipaddress.ip_address(n.address or "").is_private for n in nodes)


def test_endpoint_comes_from_the_standard_aws_environment(
    harness: AwsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.group(2)
    monkeypatch.setenv("AWS_ENDPOINT_URL", harness.moto.url)
    config = CloudConfig(aws=AwsSettings(max_attempts=1))
    with create(_spec(harness.name), config) as group:
        assert group.target_size() == 2


def test_an_unknown_group_is_an_adapter_error(harness: AwsHarness) -> None:
    group = create(_spec("no-such-asg"), harness.config)
    with group, pytest.raises(AdapterError, match="no Auto Scaling group"):
        group.target_size()


def test_a_throttled_read_is_throttled(harness: AwsHarness) -> None:
    group = harness.group(1)
    harness.moto.fail_next("throttle", action="DescribeAutoScalingGroups")
    with pytest.raises(Throttled):
        group.target_size()


def test_the_botocore_error_is_kept_as_the_cause(harness: AwsHarness) -> None:
    group = harness.group(1)
    harness.inject("quota")
    with pytest.raises(AdapterError) as info:
        group.increase_size(1)
    assert isinstance(info.value.__cause__, ClientError)


def test_missing_credentials_are_an_adapter_error(
    harness: AwsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.group(1)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    group = create(_spec(harness.name), harness.config)
    with group, pytest.raises(AdapterError, match="credentials"):
        group.target_size()
