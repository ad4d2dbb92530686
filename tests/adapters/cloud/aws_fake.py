"""moto's server on 127.0.0.1, behind a small proxy that can inject AWS error responses.

moto has no fault injection, so the proxy answers the next matching call itself with the
Query-protocol error document AWS sends (``InsufficientInstanceCapacity``,
``LimitExceeded``, ``Throttling``) and forwards everything else to moto unchanged.
"""

from __future__ import annotations

import http.client
import logging
import threading
import uuid
from urllib.parse import parse_qs

import boto3
from moto.server import ThreadedMotoServer

from tests.adapters.cloud.httpfake import LocalServer, Request, Response

REGION = "us-east-1"
CODES = {
    "stockout": ("InsufficientInstanceCapacity", "We currently do not have sufficient p5.48xlarge capacity in the Availability Zone you requested (us-east-1a)."),
    "quota": ("LimitExceeded", "You have requested more vCPU capacity than your current vCPU limit of 192 allows for the instance bucket that the specified instance type belongs to."),
    "throttle": ("Throttling", "Rate exceeded"),
}  # fmt: skip
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}


def _error_document(code: str, message: str) -> bytes:
    return (
        '<ErrorResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">'
        f"<Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>"
        "<RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>"
    ).encode()


class MotoWithFaults:
    """moto server plus a fault-injecting proxy; ``url`` is the proxy's."""

    def __init__(self) -> None:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._faults: list[tuple[str | None, str]] = []
        self._lock = threading.Lock()
        self.proxy = LocalServer(self._handle)
        self.moto_port = 0

    @property
    def url(self) -> str:
        return self.proxy.url

    def start(self) -> MotoWithFaults:
        self._moto.start()
        self.moto_port = self._moto.get_host_and_port()[1]
        self.proxy.start()
        moto_url = f"http://127.0.0.1:{self.moto_port}"
        keys = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
        self.ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_url, **keys)
        self.asg = boto3.client("autoscaling", region_name=REGION, endpoint_url=moto_url, **keys)
        # moto keeps its state per process, shared by every server started in it: a
        # fixed template name would collide with another test's.
        self.template = f"gpu-node-{uuid.uuid4().hex[:8]}"
        self.ec2.create_launch_template(
            LaunchTemplateName=self.template,
            LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "p5.48xlarge"},
        )
        return self

    def stop(self) -> None:
        self.ec2.close()
        self.asg.close()
        self.proxy.stop()
        self._moto.stop()

    def create_asg(self, name: str, *, size: int, max_size: int) -> None:
        """An Auto Scaling group of ``size`` instances (set up directly in moto)."""
        self.asg.create_auto_scaling_group(
            AutoScalingGroupName=name,
            LaunchTemplate={"LaunchTemplateName": self.template, "Version": "$Latest"},
            MinSize=0,
            MaxSize=max_size,
            DesiredCapacity=size,
            AvailabilityZones=[f"{REGION}a"],
        )

    def desired_capacity(self, name: str) -> int:
        """The group's desired capacity as moto has it."""
        group = self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])
        return int(group["AutoScalingGroups"][0]["DesiredCapacity"])

    def reset_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def fail_next(self, kind: str, action: str | None = None) -> None:
        """Answer the next call of ``action`` (any mutating ASG call if None) with ``kind``."""
        with self._lock:
            self._faults.append((action, kind))

    def _fault_for(self, action: str) -> str | None:
        mutating = action.startswith(("Set", "Terminate", "Update"))
        with self._lock:
            for n, (wanted, kind) in enumerate(self._faults):
                if wanted == action or (wanted is None and mutating):
                    del self._faults[n]
                    return kind
        return None

    def _handle(self, req: Request) -> Response:
        action = (parse_qs(req.body.decode()).get("Action") or [""])[0]
        kind = self._fault_for(action)
        if kind is not None:
            body = _error_document(*CODES[kind])
            return Response(400, body, (("Content-Type", "text/xml"),))
        conn = http.client.HTTPConnection("127.0.0.1", self.moto_port, timeout=30)
        try:
            headers = {k: v for k, v in req.headers.items() if k not in ("host", "connection")}
            conn.request(req.method, req.target, body=req.body, headers=headers)
            upstream = conn.getresponse()
            body = upstream.read()
            kept = tuple((k, v) for k, v in upstream.getheaders() if k.lower() not in _HOP_BY_HOP)
            return Response(upstream.status, body, kept)
        finally:
            conn.close()
