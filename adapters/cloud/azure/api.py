"""Thin wrapper over azure-mgmt-compute's VM scale set operations; the Azure boundary.

Long-running operations poll every ``AzureSettings.polling_interval_s`` (passed to each
``begin_*`` call) and give up after ``operation_timeout_s``. Errors leave as
``base.errors`` types: ``SkuNotAvailable``, ``AllocationFailed`` and other allocation
failures -> ``OutOfCapacity``; ``QuotaExceeded``, and ``OperationNotAllowed`` about a
quota -> ``QuotaExceeded``; HTTP 429 or a throttling code -> ``Throttled``; the rest,
including authentication and connection failures -> ``AdapterError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError, HttpResponseError
from azure.core.polling import LROPoller
from azure.core.rest import HttpRequest
from azure.identity import DefaultAzureCredential
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute.models import (
    Sku,
    VirtualMachineScaleSetUpdate,
    VirtualMachineScaleSetVMInstanceRequiredIDs,
)

from adapters.cloud.config import AzureSettings
from base.errors import AdapterError, OutOfCapacity, QuotaExceeded, Throttled

__all__ = ["ScaleSetApi", "ScaleSetVm", "classify", "classify_code"]

_CAPACITY = frozenset(
    {
        "SkuNotAvailable",
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
        "OverconstrainedZonalAllocationRequest",
    }
)
_QUOTA = frozenset({"QuotaExceeded", "ResourceQuotaExceeded", "SkuFamilyQuotaExceeded"})
_THROTTLE = frozenset({"TooManyRequests", "SubscriptionRequestsThrottled", "RequestThrottled"})


def classify_code(code: str, message: str, status: int | None) -> type[AdapterError]:
    """The error class for an ARM error code, its message and the HTTP status."""
    if code in _CAPACITY:
        return OutOfCapacity
    if code in _QUOTA or (code == "OperationNotAllowed" and "quota" in message.lower()):
        return QuotaExceeded
    if code in _THROTTLE or status == 429:
        return Throttled
    return AdapterError


def _codes(exc: HttpResponseError) -> list[tuple[str, str]]:
    # The top-level code, then the inner ones: ARM often wraps an allocation failure.
    error = exc.error
    if error is None:
        return []
    return [(error.code or "", error.message or "")] + [
        (d.code or "", d.message or "") for d in error.details or []
    ]


def classify(exc: HttpResponseError, action: str) -> AdapterError:
    """Our error for an azure-core ``HttpResponseError`` raised by ``action``."""
    found = _codes(exc) or [("", exc.message)]
    classes = [classify_code(code, msg, exc.status_code) for code, msg in found]
    cls = next((c for c in classes if c is not AdapterError), AdapterError)
    code, message = found[0]
    return cls(f"azure {action}: {exc.status_code} {code}: {message or exc.message}")


@contextmanager
def _boundary(action: str) -> Iterator[None]:
    try:
        yield
    except HttpResponseError as exc:
        raise classify(exc, action) from exc
    except AzureError as exc:
        raise AdapterError(f"azure {action}: {exc}") from exc


# The Microsoft.Network API version of the scale-set network interface list.
_NETWORK_API = "2018-10-01"


def _nic_address(nic: Any) -> tuple[str, str]:
    """(instance id, private IP) of one network interface of the list (a VM's primary
    NIC, its primary IP configuration); empty strings when it has none."""
    props = nic.get("properties", {}) if isinstance(nic, dict) else {}
    if props.get("primary") is False:
        return "", ""
    vm_id = str(props.get("virtualMachine", {}).get("id", "")).rstrip("/").rsplit("/", 1)[-1]
    configs = props.get("ipConfigurations", [])
    primary = [c for c in configs if c.get("properties", {}).get("primary", True)] or configs
    ip = primary[0].get("properties", {}).get("privateIPAddress", "") if primary else ""
    return vm_id, str(ip or "")


@dataclass(frozen=True, slots=True)
class ScaleSetVm:
    """One VM of a scale set: its instance id and provisioning state."""

    instance_id: str
    provisioning_state: str


class ScaleSetApi:
    """One VM scale set through one ``ComputeManagementClient``."""

    def __init__(
        self, settings: AzureSettings, subscription: str, resource_group: str, name: str
    ) -> None:
        self._settings = settings
        self._subscription = subscription
        self._group = resource_group
        self._name = name
        self._owned_credential: DefaultAzureCredential | None = None
        credential = cast(TokenCredential | None, settings.credential)
        if credential is None:
            credential = self._owned_credential = DefaultAzureCredential()
        with _boundary("client setup"):
            self._client = ComputeManagementClient(
                credential,
                subscription,
                base_url=settings.base_url,
                connection_verify=settings.connection_verify,
                retry_total=settings.retry_total,
                connection_timeout=settings.timeout_s,
                read_timeout=settings.timeout_s,
            )

    @property
    def where(self) -> str:
        """``resource_group/name``, for messages."""
        return f"{self._group}/{self._name}"

    def capacity(self) -> int:
        """The scale set's ``sku.capacity``."""
        with _boundary(f"get {self.where}"):
            vmss = self._client.virtual_machine_scale_sets.get(self._group, self._name)
        return int(vmss.sku.capacity or 0) if vmss.sku else 0

    def vms(self) -> list[ScaleSetVm]:
        """Every VM of the scale set, all pages."""
        with _boundary(f"list VMs of {self.where}"):
            return [
                ScaleSetVm(
                    vm.instance_id or "",
                    (vm.properties.provisioning_state if vm.properties else None) or "",
                )
                for vm in self._client.virtual_machine_scale_set_vms.list(self._group, self._name)
            ]

    def private_addresses(self) -> dict[str, str]:
        """The private IP of each VM's primary NIC, by instance id (VMs without one are
        left out): ARM's list of the scale set's network interfaces, all pages (served
        by the network provider under the scale set's path; sent through the compute
        client's pipeline, its credential and retries, with no network SDK)."""
        url = (
            f"/subscriptions/{self._subscription}/resourceGroups/{self._group}/providers"
            f"/Microsoft.Compute/virtualMachineScaleSets/{self._name}/networkInterfaces"
            f"?api-version={_NETWORK_API}"
        )
        out: dict[str, str] = {}
        with _boundary(f"list network interfaces of {self.where}"):
            while url:
                response = self._client.send_request(HttpRequest("GET", url))
                response.raise_for_status()
                page = response.json()
                for nic in page.get("value", []):
                    vm_id, ip = _nic_address(nic)
                    if vm_id and ip:
                        out[vm_id] = ip
                url = page.get("nextLink") or ""
        return out

    def set_capacity(self, capacity: int) -> None:
        """PATCH ``sku.capacity`` (keeping the SKU's name and tier) and wait."""
        action = f"update {self.where} capacity={capacity}"
        with _boundary(action):
            current = self._client.virtual_machine_scale_sets.get(self._group, self._name)
            sku = current.sku or Sku()
            update = VirtualMachineScaleSetUpdate(
                sku=Sku(name=sku.name, tier=sku.tier, capacity=capacity)
            )
            poller = self._client.virtual_machine_scale_sets.begin_update(
                self._group,
                self._name,
                update,
                polling_interval=self._settings.polling_interval_s,
            )
            self._finish(poller, action)

    def delete_instances(self, instance_ids: list[str]) -> None:
        """Delete these VMs (the scale set's capacity drops by as many) and wait."""
        action = f"delete instances {instance_ids} of {self.where}"
        with _boundary(action):
            poller = self._client.virtual_machine_scale_sets.begin_delete_instances(
                self._group,
                self._name,
                VirtualMachineScaleSetVMInstanceRequiredIDs(instance_ids=instance_ids),
                polling_interval=self._settings.polling_interval_s,
            )
            self._finish(poller, action)

    def _finish(self, poller: LROPoller[Any], action: str) -> None:
        poller.result(timeout=self._settings.operation_timeout_s)
        if not poller.done():
            raise AdapterError(f"azure {action}: not done in time; it may still complete")

    def close(self) -> None:
        """Close the client's session, and the credential if this object made it."""
        self._client.close()
        if self._owned_credential is not None:
            self._owned_credential.close()
