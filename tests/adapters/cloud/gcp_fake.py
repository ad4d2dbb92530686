"""A local REST fake of Compute Engine's managed instance groups and their operations.

Speaks the real v1 paths (zonal and regional): ``instanceGroupManagers/{name}`` GET,
``/resize`` (``?size=``), ``/deleteInstances`` (``{"instances": [...]}``),
``/listManagedInstances`` (paged by ``pageToken``), ``zones/{zone}/instances`` GET (each
instance's ``networkInterfaces[].networkIP``, paged), and ``operations/{op}`` GET and
``/wait``. A write returns a RUNNING operation that is DONE when polled. Failures can be
injected, by default into the next write: quota (403 ``quotaExceeded``), throttle (429 ``rateLimitExceeded``) and
stockout (the operation ends with ``ZONE_RESOURCE_POOL_EXHAUSTED``).
"""

from __future__ import annotations

import itertools
import re
import threading
from dataclasses import dataclass, field

from tests.adapters.cloud.httpfake import LocalServer, Request, Response, json_response

_BASE = "https://www.googleapis.com/compute/v1"
_IGM = re.compile(
    r"^/compute/v1/projects/(?P<project>[^/]+)/(?P<scope>zones|regions)/(?P<loc>[^/]+)"
    r"/instanceGroupManagers/(?P<name>[^/]+?)(?:/(?P<verb>resize|deleteInstances|listManagedInstances))?$"
)
_OP = re.compile(
    r"^/compute/v1/projects/(?P<project>[^/]+)/(?P<scope>zones|regions)/(?P<loc>[^/]+)"
    r"/operations/(?P<op>[^/]+?)(?P<wait>/wait)?$"
)
# deleteInstances takes full URLs or partial ones from zones/ on.
_INSTANCES = re.compile(
    r"^/compute/v1/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/instances$"
)
_INSTANCE = re.compile(
    r"^(?:https://[^/]+/compute/v1/projects/[^/]+/)?zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)$"
)
_PAGE = 3
_WRITES = ("resize", "deleteInstances")
_STOCKOUT = "ZONE_RESOURCE_POOL_EXHAUSTED"

Key = tuple[str, str, str, str]  # project, "zones"|"regions", location, name


@dataclass
class _Instance:
    zone: str
    action: str = "NONE"
    status: str = "RUNNING"
    error: str | None = None
    ip: str = ""


@dataclass
class _Mig:
    target: int
    instances: dict[str, _Instance] = field(default_factory=dict)
    held: bool = False
    stockout_creates: bool = False


def _error(status: int, reason: str, message: str) -> Response:
    errors = [{"message": message, "domain": "usageLimits", "reason": reason}]
    return json_response(status, {"error": {"code": status, "message": message, "errors": errors}})


class GcpFake:
    def __init__(self) -> None:
        self._migs: dict[Key, _Mig] = {}
        self._ops: dict[str, dict[str, object]] = {}
        self._faults: list[tuple[str | None, str]] = []
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self.waited: list[str] = []
        self.server = LocalServer(self._handle)

    def add_mig(self, project: str, name: str, *, zone: str | None = None,
                region: str | None = None, size: int = 0) -> Key:  # fmt: skip
        key: Key = (
            (project, "zones", zone, name) if zone else (project, "regions", region or "", name)
        )
        with self._lock:
            self._migs[key] = mig = _Mig(size)
            self._fill(key, mig)
        return key

    def reset_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def fail_next(self, kind: str, verb: str | None = None) -> None:
        with self._lock:
            self._faults.append((verb, kind))

    def mig(self, key: Key) -> _Mig:
        return self._migs[key]

    def hold(self, key: Key) -> None:
        """New instances stop appearing until :meth:`release`."""
        with self._lock:
            self._migs[key].held = True

    def release(self, key: Key) -> None:
        with self._lock:
            mig = self._migs[key]
            mig.held = False
            self._fill(key, mig)

    def _fill(self, key: Key, mig: _Mig) -> None:
        if mig.held:
            return
        _, scope, loc, name = key
        zones = [loc] if scope == "zones" else [f"{loc}-a", f"{loc}-b", f"{loc}-c"]
        while len(mig.instances) < mig.target:
            n = next(self._seq)
            instance = _Instance(zones[n % len(zones)], ip=f"10.128.{n // 256}.{n % 256}")
            if mig.stockout_creates:
                instance = _Instance(instance.zone, "CREATING", "", _STOCKOUT)
            mig.instances[f"{name}-{n:04x}"] = instance

    def _handle(self, req: Request) -> Response:
        with self._lock:
            if m := _IGM.match(req.path):
                key: Key = (m["project"], m["scope"], m["loc"], m["name"])
                if key not in self._migs:
                    return _error(404, "notFound", f"The resource '{req.path}' was not found")
                return self._igm(req, key, m["verb"])
            if m := _OP.match(req.path):
                return self._operation(m["op"], bool(m["wait"]))
            if (m := _INSTANCES.match(req.path)) and req.method == "GET":
                return self._instances(m["project"], m["zone"], int(req.param("pageToken") or 0))
            return _error(404, "notFound", f"no route {req.method} {req.path}")

    def _igm(self, req: Request, key: Key, verb: str | None) -> Response:
        mig = self._migs[key]
        project, scope, loc, name = key
        this = verb or "get"
        for n, (fault_verb, kind) in enumerate(self._faults):
            if fault_verb == this or (fault_verb is None and this in _WRITES):
                del self._faults[n]
                if kind == "quota":
                    return _error(
                        403,
                        "quotaExceeded",
                        "Quota 'NVIDIA_H100_GPUS' exceeded.  Limit: 8.0 in region us-central1.",
                    )
                if kind == "throttle":
                    return _error(429, "rateLimitExceeded", "Rate Limit Exceeded")
                return self._new_op(key, this, _STOCKOUT)
        if verb is None and req.method == "GET":
            return json_response(200, {
                "kind": "compute#instanceGroupManager", "name": name, "targetSize": mig.target,
                scope[:-1]: f"{_BASE}/projects/{project}/{scope}/{loc}",
                "selfLink": f"{_BASE}{req.path.removeprefix('/compute/v1')}",
            })  # fmt: skip
        if verb == "listManagedInstances" and req.method == "POST":
            return self._list(key, mig, int(req.param("pageToken") or 0))
        if verb == "resize" and req.method == "POST":
            mig.target = int(req.param("size") or "-1")
            if mig.target < 0:
                return _error(400, "invalid", "Invalid value for field 'size'")
            for doomed in list(mig.instances)[mig.target :]:
                del mig.instances[doomed]
            self._fill(key, mig)
            return self._new_op(key, verb)
        if verb == "deleteInstances" and req.method == "POST":
            refs = [_INSTANCE.match(url) for url in req.json().get("instances", [])]
            if not all(refs):
                return _error(400, "invalid", "Invalid value for field 'instances'")
            names = [r["name"] for r in refs if r]
            known = [r["name"] for r in refs if r and self._is_member(mig, r["zone"], r["name"])]
            if len(known) < len(names) and not req.json().get("skipInstancesOnValidationError"):
                return _error(400, "invalid", "instance is not a member of the group")
            for doomed in known:
                del mig.instances[doomed]
            mig.target -= len(known)
            return self._new_op(key, verb)
        return _error(400, "badRequest", f"unsupported {req.method} {verb}")

    @staticmethod
    def _is_member(mig: _Mig, zone: str, name: str) -> bool:
        return name in mig.instances and mig.instances[name].zone == zone

    def _list(self, key: Key, mig: _Mig, start: int) -> Response:
        project = key[0]
        items = [
            {"instance": f"{_BASE}/projects/{project}/zones/{i.zone}/instances/{n}",
             "id": str(1000 + start + k), "name": n, "currentAction": i.action,
             **({"instanceStatus": i.status} if i.status else {}),
             **({"lastAttempt": {"errors": {"errors": [{"code": i.error, "message": "The zone does not have enough resources available to fulfill the request."}]}}} if i.error else {})}
            for k, (n, i) in enumerate(list(mig.instances.items())[start : start + _PAGE])
        ]  # fmt: skip
        body: dict[str, object] = {"managedInstances": items}
        if start + _PAGE < len(mig.instances):
            body["nextPageToken"] = str(start + _PAGE)
        return json_response(200, body)

    def _instances(self, project: str, zone: str, start: int) -> Response:
        every = [
            (name, i)
            for (p, _, _, _), mig in self._migs.items()
            if p == project
            for name, i in mig.instances.items()
            if i.zone == zone and i.status
        ]
        items = [
            {"kind": "compute#instance", "name": name, "status": i.status,
             "zone": f"{_BASE}/projects/{project}/zones/{zone}",
             "networkInterfaces": [{"name": "nic0", "networkIP": i.ip}]}
            for name, i in every[start : start + _PAGE]
        ]  # fmt: skip
        body: dict[str, object] = {"kind": "compute#instanceList", "items": items}
        if start + _PAGE < len(every):
            body["nextPageToken"] = str(start + _PAGE)
        return json_response(200, body)

    def _new_op(self, key: Key, verb: str, error: str | None = None) -> Response:
        project, scope, loc, name = key
        op_name = f"operation-{next(self._seq)}"
        body: dict[str, object] = {
            "kind": "compute#operation", "name": op_name, "status": "RUNNING",
            "operationType": f"compute.instanceGroupManagers.{verb}",
            "targetLink": f"{_BASE}/projects/{project}/{scope}/{loc}/instanceGroupManagers/{name}",
            scope[:-1]: f"{_BASE}/projects/{project}/{scope}/{loc}",
        }  # fmt: skip
        if error:
            body["error"] = {"errors": [{"code": error, "message": f"The {loc} does not have enough resources available to fulfill the request."}]}  # fmt: skip
            body["httpErrorStatusCode"] = 503
        self._ops[op_name] = body
        return json_response(200, body)

    def _operation(self, op_name: str, wait: bool) -> Response:
        op = self._ops.get(op_name)
        if op is None:
            return _error(404, "notFound", f"operation {op_name} not found")
        if wait:
            self.waited.append(op_name)
        return json_response(200, {**op, "status": "DONE"})
