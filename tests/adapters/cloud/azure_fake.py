"""A local HTTPS fake of the ARM paths of VM scale sets, with Azure-style long-running ops.

``.../virtualMachineScaleSets/{name}`` GET, PATCH and PUT (``sku.capacity``),
``/virtualMachines`` GET (paged by ``nextLink``), ``/networkInterfaces`` GET (each VM's
primary NIC and its private IP, paged) and ``/delete`` POST
(``{"instanceIds": [...]}``). Writes answer with an ``Azure-AsyncOperation`` (and, for
POST, ``Location``) header; the operation is InProgress on its first poll and finished on
the next. Every request must carry the test bearer token. Injectable failures: throttle
(429 ``TooManyRequests``), quota (409 ``OperationNotAllowed`` about a quota) and stockout
(the update is accepted, the new VMs fail and the operation ends ``AllocationFailed``).
"""

from __future__ import annotations

import itertools
import re
import threading
from dataclasses import dataclass, field

from tests.adapters.cloud.httpfake import LocalServer, Request, Response, json_response

TOKEN = "skyroute-test-token"
_VMSS = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.Compute"
    r"/virtualMachineScaleSets/(?P<name>[^/]+?)(?:/(?P<verb>virtualMachines|networkInterfaces|delete))?$"
)
_OP = re.compile(r"^/fake-operations/(?P<op>\d+)(?P<result>/result)?$")
_PAGE = 3
_QUOTA_MESSAGE = (
    "Operation could not be completed as it results in exceeding approved "
    "standardNCADSH100v5Family Cores quota."
)

Key = tuple[str, str, str]  # subscription, resource group, name


@dataclass
class _ScaleSet:
    capacity: int
    vms: dict[str, str] = field(default_factory=dict)  # instance id -> provisioning state
    held: bool = False


@dataclass
class _Operation:
    error: dict[str, str] | None
    polls: int = 0


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return json_response(status, {"error": {"code": code, "message": message}}, headers)


class AzureFake:
    def __init__(self, ssl_context: object) -> None:
        self._sets: dict[Key, _ScaleSet] = {}
        self._ops: dict[str, _Operation] = {}
        self._faults: list[str] = []
        self._ids = itertools.count(0)
        self._op_ids = itertools.count(1)
        self._lock = threading.Lock()
        self.server = LocalServer(self._handle, ssl_context)  # type: ignore[arg-type]

    def add_scale_set(self, sub: str, rg: str, name: str, size: int = 0) -> Key:
        key = (sub, rg, name)
        with self._lock:
            self._sets[key] = scale_set = _ScaleSet(size)
            self._fill(scale_set, "Succeeded")
        return key

    def scale_set(self, key: Key) -> _ScaleSet:
        return self._sets[key]

    def reset_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def fail_next(self, kind: str) -> None:
        """Make the next write (PATCH, PUT or delete) fail as ``kind``."""
        with self._lock:
            self._faults.append(kind)

    def hold(self, key: Key) -> None:
        """New instances stop appearing until :meth:`release`."""
        with self._lock:
            self._sets[key].held = True

    def release(self, key: Key) -> None:
        with self._lock:
            scale_set = self._sets[key]
            scale_set.held = False
            self._fill(scale_set, "Succeeded")

    def _fill(self, scale_set: _ScaleSet, state: str) -> None:
        while not scale_set.held and len(scale_set.vms) < scale_set.capacity:
            scale_set.vms[str(next(self._ids))] = state

    def _handle(self, req: Request) -> Response:
        if req.headers.get("authorization") != f"Bearer {TOKEN}":
            return _error(401, "AuthenticationFailed", "missing or wrong bearer token")
        with self._lock:
            if m := _VMSS.match(req.path):
                key = (m["sub"], m["rg"], m["name"])
                if key not in self._sets:
                    return _error(404, "ResourceNotFound", f"{m['name']} not found")
                return self._scale_set(req, key, m["verb"])
            if m := _OP.match(req.path):
                return self._operation(req, m["op"], bool(m["result"]))
            return _error(404, "NotFound", f"no route {req.method} {req.path}")

    def _scale_set(self, req: Request, key: Key, verb: str | None) -> Response:
        scale_set = self._sets[key]
        if verb == "virtualMachines" and req.method == "GET":
            return self._list(req, key, scale_set)
        if verb == "networkInterfaces" and req.method == "GET":
            return self._nics(req, key, scale_set)
        if verb is None and req.method == "GET":
            return json_response(200, self._body(key, scale_set, "Succeeded"))
        write = (verb is None and req.method in ("PATCH", "PUT")) or (
            verb == "delete" and req.method == "POST"
        )
        if not write:
            return _error(405, "MethodNotAllowed", f"{req.method} {req.path}")
        fault = self._faults.pop(0) if self._faults else None
        if fault == "throttle":
            return _error(429, "TooManyRequests", "The request is being throttled.",
                          {"Retry-After": "1"})  # fmt: skip
        if fault == "quota":
            return _error(409, "OperationNotAllowed", _QUOTA_MESSAGE)
        error = None
        if fault == "stockout":
            error = {"code": "AllocationFailed", "message": "Allocation failed. We do not have sufficient capacity for the requested VM size in this region."}  # fmt: skip
        if verb == "delete":
            ids = [i for i in req.json().get("instanceIds", []) if i in scale_set.vms]
            for instance_id in ids:
                del scale_set.vms[instance_id]
            scale_set.capacity -= len(ids)
            return self._accepted(req, error, 202, {})
        capacity = int(req.json()["sku"]["capacity"])
        for doomed in list(scale_set.vms)[capacity:]:
            del scale_set.vms[doomed]
        scale_set.capacity = capacity
        self._fill(scale_set, "Failed" if error else "Succeeded")
        return self._accepted(req, error, 200, self._body(key, scale_set, "Updating"))

    def _accepted(self, req: Request, error: dict[str, str] | None, status: int,
                  body: dict[str, object]) -> Response:  # fmt: skip
        op_id = str(next(self._op_ids))
        self._ops[op_id] = _Operation(error)
        base = f"https://{req.headers['host']}/fake-operations/{op_id}"
        headers = {"Azure-AsyncOperation": base}
        if status == 202:
            headers["Location"] = f"{base}/result"
        return json_response(status, body, headers)

    def _operation(self, req: Request, op_id: str, result: bool) -> Response:
        op = self._ops.get(op_id)
        if op is None:
            return _error(404, "NotFound", f"operation {op_id}")
        if result:
            return json_response(200, {})
        op.polls += 1
        if op.polls == 1:
            return json_response(200, {"status": "InProgress"})
        if op.error:
            return json_response(200, {"status": "Failed", "error": op.error})
        return json_response(200, {"status": "Succeeded"})

    def _list(self, req: Request, key: Key, scale_set: _ScaleSet) -> Response:
        start = int(req.param("$skiptoken") or 0)
        resource = self._resource_id(key)
        items = [
            {"id": f"{resource}/virtualMachines/{i}", "instanceId": i, "name": f"{key[2]}_{i}",
             "location": "eastus", "properties": {"provisioningState": state}}
            for i, state in list(scale_set.vms.items())[start : start + _PAGE]
        ]  # fmt: skip
        body: dict[str, object] = {"value": items}
        if start + _PAGE < len(scale_set.vms):
            body["nextLink"] = (
                f"https://{req.headers['host']}{req.path}?api-version=x&$skiptoken={start + _PAGE}"
            )
        return json_response(200, body)

    def _nics(self, req: Request, key: Key, scale_set: _ScaleSet) -> Response:
        start = int(req.param("$skiptoken") or 0)
        resource = self._resource_id(key)
        items = [
            {"id": f"{resource}/virtualMachines/{i}/networkInterfaces/nic0", "name": "nic0",
             "properties": {
                 "primary": True,
                 "virtualMachine": {"id": f"{resource}/virtualMachines/{i}"},
                 "ipConfigurations": [{"name": "ipconfig1", "properties": {
                     "primary": True, "privateIPAddress": f"10.0.{int(i) // 250}.{int(i) % 250 + 4}",
                 }}],
             }}
            for i in list(scale_set.vms)[start : start + _PAGE]
        ]  # fmt: skip
        body: dict[str, object] = {"value": items}
        if start + _PAGE < len(scale_set.vms):
            body["nextLink"] = (
                f"https://{req.headers['host']}{req.path}?api-version=x&$skiptoken={start + _PAGE}"
            )
        return json_response(200, body)

    def _resource_id(self, key: Key) -> str:
        sub, rg, name = key
        return (
            f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute"
            f"/virtualMachineScaleSets/{name}"
        )

    def _body(self, key: Key, scale_set: _ScaleSet, state: str) -> dict[str, object]:
        return {
            "id": self._resource_id(key), "name": key[2], "location": "eastus",
            "type": "Microsoft.Compute/virtualMachineScaleSets",
            "sku": {"name": "Standard_NC40ads_H100_v5", "tier": "Standard",
                    "capacity": scale_set.capacity},
            "properties": {"provisioningState": state},
        }  # fmt: skip
