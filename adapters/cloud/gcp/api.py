"""Thin wrapper over google-cloud-compute's managed-instance-group clients; the GCP boundary.

Zonal groups use ``InstanceGroupManagersClient`` and ``ZoneOperationsClient``, regional
ones the ``Region*`` pair, all on the REST transport and the endpoint in ``GcpSettings``;
the instances' internal addresses come from ``InstancesClient.list`` per zone.
Writes call the ``*_unary`` methods and wait on the returned operation through *our*
operations client: ``ExtendedOperation.result()`` would poll through an operations client
the library builds itself, on the default endpoint, whatever ``api_endpoint`` says.

Errors leave as ``base.errors`` types: ``ZONE_RESOURCE_POOL_EXHAUSTED`` and other
stockouts -> ``OutOfCapacity``; ``quotaExceeded`` / ``QUOTA_EXCEEDED`` (or a message
about a resource quota) -> ``QuotaExceeded``; ``rateLimitExceeded`` reasons, per-minute
API quotas, HTTP 429 and ``ResourceExhausted`` -> ``Throttled``; the rest -> ``AdapterError``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.auth.exceptions import GoogleAuthError
from google.cloud import compute_v1

from adapters.cloud.config import GcpSettings
from base.errors import AdapterError, OutOfCapacity, QuotaExceeded, Throttled

__all__ = ["MigApi", "RegionalMigApi", "ZonalMigApi", "classify", "classify_codes"]

_STOCKOUT_MARKERS = ("RESOURCE_POOL_EXHAUSTED", "STOCKOUT", "resourcePoolExhausted")
_RATE_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"})
_QUOTA_REASONS = frozenset({"quotaExceeded", "QUOTA_EXCEEDED", "limitExceeded"})
_RATE_QUOTA = re.compile(r"per (?:\d+ )?(?:second|minute)s?\b", re.IGNORECASE)
# The server holds a wait call open for up to two minutes; the client must outwait it.
_WAIT_CALL_S = 150.0


def classify_codes(codes: Iterable[str], message: str) -> type[AdapterError] | None:
    """The error class that GCP reasons/codes (or a stockout message) name, if any."""
    found = set(codes)
    if any(m in c for c in [*found, message] for m in _STOCKOUT_MARKERS):
        return OutOfCapacity
    if found & _RATE_REASONS:
        return Throttled
    if found & _QUOTA_REASONS:
        return QuotaExceeded
    return None


def classify(exc: gexc.GoogleAPICallError, action: str) -> AdapterError:
    """Our error for a google.api_core call error raised by ``action``.

    Structured reasons decide first. Without one, a message about a quota is a quota,
    unless it is a per-second or per-minute API rate quota, which is throttling, as is
    any other 429 / ``ResourceExhausted``.
    """
    reasons = [exc.reason or ""] + [e.get("reason", "") for e in exc.errors if isinstance(e, dict)]
    cls = classify_codes(reasons, exc.message)
    if cls is None and "quota" in exc.message.lower():
        cls = Throttled if _RATE_QUOTA.search(exc.message) else QuotaExceeded
    if cls is None and isinstance(exc, gexc.TooManyRequests | gexc.ResourceExhausted):
        cls = Throttled
    return (cls or AdapterError)(f"gcp {action}: {exc.code} {exc.message}")


@contextmanager
def _boundary(action: str) -> Iterator[None]:
    try:
        yield
    except gexc.GoogleAPICallError as exc:
        raise classify(exc, action) from exc
    except (gexc.GoogleAPIError, GoogleAuthError, OSError) as exc:
        # OSError covers requests' connection errors and timeouts.
        raise AdapterError(f"gcp {action}: {exc}") from exc


def _auth(settings: GcpSettings) -> tuple[Credentials | None, ClientOptions | None]:
    credentials = AnonymousCredentials() if settings.anonymous else None  # type: ignore[no-untyped-call]
    options = ClientOptions(api_endpoint=settings.api_endpoint) if settings.api_endpoint else None
    return credentials, options


@dataclass(frozen=True)
class _Scope:
    """What differs between a zonal and a regional group: the keyword that names the
    location in every call, the clients, and the deleteInstances request."""

    keyword: str  # "zone" or "region"
    igm_client: type[Any]
    ops_client: type[Any]
    delete_request: type[Any]
    delete_field: str


_ZONAL = _Scope(
    "zone",
    compute_v1.InstanceGroupManagersClient,
    compute_v1.ZoneOperationsClient,
    compute_v1.InstanceGroupManagersDeleteInstancesRequest,
    "instance_group_managers_delete_instances_request_resource",
)
_REGIONAL = _Scope(
    "region",
    compute_v1.RegionInstanceGroupManagersClient,
    compute_v1.RegionOperationsClient,
    compute_v1.RegionInstanceGroupManagersDeleteInstancesRequest,
    "region_instance_group_managers_delete_instances_request_resource",
)


class MigApi:
    """One managed instance group: read, resize, delete instances, waiting on operations.
    Build it as ``ZonalMigApi`` or ``RegionalMigApi``."""

    def __init__(
        self, settings: GcpSettings, project: str, location: str, name: str, scope: _Scope
    ) -> None:
        self._settings = settings
        self._project = project
        self._location = location
        self._name = name
        self._scope = scope
        self._instances: compute_v1.InstancesClient | None = None
        creds, opts = _auth(settings)
        with _boundary("client setup"):
            self._igm = scope.igm_client(credentials=creds, client_options=opts, transport="rest")
            self._ops = scope.ops_client(credentials=creds, client_options=opts, transport="rest")

    @property
    def where(self) -> str:
        """``project/location/name``, for messages."""
        return f"{self._project}/{self._location}/{self._name}"

    def _at(self, **more: Any) -> dict[str, Any]:
        # The arguments every group call takes, the location under its scope's keyword.
        return {
            "project": self._project,
            self._scope.keyword: self._location,
            "instance_group_manager": self._name,
            "timeout": self._settings.timeout_s,
            **more,
        }

    def _get(self) -> compute_v1.InstanceGroupManager:
        group: compute_v1.InstanceGroupManager = self._igm.get(**self._at())
        return group

    def _list(self) -> Iterable[compute_v1.ManagedInstance]:
        listed: Iterable[compute_v1.ManagedInstance] = self._igm.list_managed_instances(
            **self._at()
        )
        return listed

    def _resize(self, size: int) -> compute_v1.Operation:
        operation: compute_v1.Operation = self._igm.resize_unary(**self._at(size=size))
        return operation

    def _delete(self, instances: list[str]) -> compute_v1.Operation:
        body = self._scope.delete_request(
            instances=instances, skip_instances_on_validation_error=True
        )
        operation: compute_v1.Operation = self._igm.delete_instances_unary(
            **self._at(**{self._scope.delete_field: body})
        )
        return operation

    def _wait_once(self, operation: str) -> compute_v1.Operation:
        done: compute_v1.Operation = self._ops.wait(
            project=self._project,
            operation=operation,
            timeout=self._wait_timeout(),
            **{self._scope.keyword: self._location},
        )
        return done

    def close(self) -> None:
        """Close the clients' HTTP sessions."""
        self._igm.transport.close()
        self._ops.transport.close()
        if self._instances is not None:
            self._instances.transport.close()  # type: ignore[no-untyped-call]

    def target_size(self) -> int:
        """The group's ``targetSize``."""
        with _boundary(f"get {self.where}"):
            return int(self._get().target_size)

    def managed_instances(self) -> list[compute_v1.ManagedInstance]:
        """Every instance of the group, all pages."""
        with _boundary(f"listManagedInstances {self.where}"):
            return list(self._list())

    def instance_addresses(self, zones: Iterable[str]) -> dict[str, str]:
        """The internal IP (first network interface's ``networkIP``) of every instance
        in ``zones``, by instance name; instances without one are left out. One paged
        ``instances.list`` per zone."""
        out: dict[str, str] = {}
        for zone in sorted(set(zones)):
            with _boundary(f"list instances in {self._project}/{zone}"):
                if self._instances is None:
                    creds, opts = _auth(self._settings)
                    self._instances = compute_v1.InstancesClient(
                        credentials=creds, client_options=opts, transport="rest"
                    )
                listed = self._instances.list(
                    project=self._project, zone=zone, timeout=self._settings.timeout_s
                )
                for instance in listed:
                    nics = list(instance.network_interfaces)
                    if nics and nics[0].network_i_p:
                        out[instance.name] = nics[0].network_i_p
        return out

    def resize(self, size: int) -> None:
        """Set ``targetSize`` and wait until the operation is done."""
        with _boundary(f"resize {self.where} to {size}"):
            operation = self._resize(size)
        self._wait(operation, f"resize {self.where} to {size}")

    def delete_instances(self, instances: Sequence[str]) -> None:
        """Delete these instances (URLs or partial URLs), lowering ``targetSize`` by as
        many, and wait. Instances no longer in the group are skipped, not an error."""
        with _boundary(f"deleteInstances {self.where}"):
            operation = self._delete(list(instances))
        self._wait(operation, f"deleteInstances {self.where}")

    def _wait(self, operation: compute_v1.Operation, action: str) -> None:
        deadline = time.monotonic() + self._settings.operation_timeout_s
        while operation.status != compute_v1.Operation.Status.DONE:
            if time.monotonic() >= deadline:
                raise AdapterError(f"gcp {action}: operation {operation.name} not done in time")
            with _boundary(f"wait {operation.name}"):
                operation = self._wait_once(operation.name)
        errors = list(operation.error.errors)
        if errors:
            message = "; ".join(f"{e.code}: {e.message}" for e in errors)
            cls = classify_codes([e.code for e in errors], message) or AdapterError
            raise cls(f"gcp {action}: {message}")

    def _wait_timeout(self) -> float:
        return max(self._settings.timeout_s, _WAIT_CALL_S)


class ZonalMigApi(MigApi):
    """A zonal managed instance group."""

    def __init__(self, settings: GcpSettings, project: str, zone: str, name: str) -> None:
        super().__init__(settings, project, zone, name, _ZONAL)


class RegionalMigApi(MigApi):
    """A regional managed instance group."""

    def __init__(self, settings: GcpSettings, project: str, region: str, name: str) -> None:
        super().__init__(settings, project, region, name, _REGIONAL)
