"""Thin wrapper over boto3's ``autoscaling`` and ``ec2`` clients; the AWS error boundary.

Every botocore exception leaves this module as a ``base.errors.AdapterError``:

- ``InsufficientInstanceCapacity`` and kin            -> ``OutOfCapacity``
- ``LimitExceeded``, ``VcpuLimitExceeded`` and kin    -> ``QuotaExceeded``
- ``Throttling``, ``RequestLimitExceeded``, contention -> ``Throttled``
- anything else, including no credentials or no endpoint -> ``AdapterError``
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

from adapters.cloud.config import AwsSettings
from base.errors import AdapterError, OutOfCapacity, QuotaExceeded, Throttled

__all__ = ["AsgDescription", "AsgInstance", "AutoScalingApi", "classify"]

_BY_CODE: MappingProxyType[str, type[AdapterError]] = MappingProxyType(
    {
        "InsufficientInstanceCapacity": OutOfCapacity,
        "InsufficientHostCapacity": OutOfCapacity,
        "InsufficientReservedInstanceCapacity": OutOfCapacity,
        "InsufficientCapacity": OutOfCapacity,
        "LimitExceeded": QuotaExceeded,
        "InstanceLimitExceeded": QuotaExceeded,
        "VcpuLimitExceeded": QuotaExceeded,
        "MaxSpotInstanceCountExceeded": QuotaExceeded,
        "ServiceQuotaExceededException": QuotaExceeded,
        "Throttling": Throttled,
        "ThrottlingException": Throttled,
        "RequestLimitExceeded": Throttled,
        "TooManyRequestsException": Throttled,
        # Another change to the group is still being applied: retry later.
        "ResourceContention": Throttled,
        "ScalingActivityInProgress": Throttled,
    }
)


def classify(exc: ClientError, action: str) -> AdapterError:
    """Our error for a botocore ``ClientError`` raised by ``action``."""
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    message = str(error.get("Message", "")) or str(exc)
    return _BY_CODE.get(code, AdapterError)(f"aws {action}: {code}: {message}")


@contextmanager
def _boundary(action: str) -> Iterator[None]:
    try:
        yield
    except ClientError as exc:
        raise classify(exc, action) from exc
    except BotoCoreError as exc:
        raise AdapterError(f"aws {action}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class AsgInstance:
    """One instance of an Auto Scaling group, as ``describe_auto_scaling_groups`` has it."""

    id: str
    lifecycle_state: str
    health_status: str


@dataclass(frozen=True, slots=True)
class AsgDescription:
    """The fields of an Auto Scaling group the adapter uses."""

    name: str
    min_size: int
    max_size: int
    desired_capacity: int
    instances: tuple[AsgInstance, ...]


class AutoScalingApi:
    """boto3 clients for one region, created once and closed by :meth:`close`."""

    def __init__(self, settings: AwsSettings, region: str) -> None:
        config = Config(
            retries={"mode": "standard", "total_max_attempts": settings.max_attempts},
            connect_timeout=settings.timeout_s,
            read_timeout=settings.timeout_s,
        )
        with _boundary("client setup"):
            session = boto3.session.Session(profile_name=settings.profile, region_name=region)
            self._asg = session.client(
                "autoscaling", endpoint_url=settings.endpoint_url, config=config
            )
            self._ec2 = session.client("ec2", endpoint_url=settings.endpoint_url, config=config)

    def describe_group(self, name: str) -> AsgDescription:
        """The group called ``name``; ``AdapterError`` if there is none."""
        with _boundary(f"describe_auto_scaling_groups {name}"):
            groups = self._asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])
        found = groups.get("AutoScalingGroups", [])
        if not found:
            raise AdapterError(f"aws: no Auto Scaling group named {name!r}")
        group = found[0]
        return AsgDescription(
            name=name,
            min_size=int(group["MinSize"]),
            max_size=int(group["MaxSize"]),
            desired_capacity=int(group["DesiredCapacity"]),
            instances=tuple(
                AsgInstance(i["InstanceId"], i["LifecycleState"], i.get("HealthStatus", ""))
                for i in group.get("Instances", [])
            ),
        )

    def private_ips(self, instance_ids: Sequence[str]) -> dict[str, str]:
        """Private IPv4 address by instance id; instances without one are left out."""
        if not instance_ids:
            return {}
        found: dict[str, str] = {}
        with _boundary("describe_instances"):
            pages = self._ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": "instance-id", "Values": list(instance_ids)}]
            )
            for page in pages:
                for reservation in page.get("Reservations", []):
                    for instance in reservation.get("Instances", []):
                        if instance.get("PrivateIpAddress"):
                            found[instance["InstanceId"]] = instance["PrivateIpAddress"]
        return found

    def set_desired_capacity(self, name: str, capacity: int) -> None:
        """Ask the group for ``capacity`` instances, ignoring its cooldown."""
        with _boundary(f"set_desired_capacity {name}={capacity}"):
            self._asg.set_desired_capacity(
                AutoScalingGroupName=name, DesiredCapacity=capacity, HonorCooldown=False
            )

    def terminate_with_decrement(self, instance_id: str) -> None:
        """Terminate one instance and lower its group's desired capacity by one."""
        with _boundary(f"terminate_instance_in_auto_scaling_group {instance_id}"):
            self._asg.terminate_instance_in_auto_scaling_group(
                InstanceId=instance_id, ShouldDecrementDesiredCapacity=True
            )

    def close(self) -> None:
        """Close both clients' connection pools."""
        self._asg.close()
        self._ec2.close()
