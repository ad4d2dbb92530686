"""Each cloud's errors mapped to ours, at the SDK-wrapper boundary (no network)."""

from __future__ import annotations

import pytest
from azure.core.exceptions import HttpResponseError, ODataV4Format
from botocore.exceptions import ClientError
from google.api_core import exceptions as gexc

from adapters.cloud.aws.api import classify as classify_aws
from adapters.cloud.azure.api import classify as classify_azure
from adapters.cloud.azure.api import classify_code as classify_azure_code
from adapters.cloud.gcp.api import classify as classify_gcp
from adapters.cloud.gcp.api import classify_codes as classify_gcp_codes
from base.errors import AdapterError, OutOfCapacity, QuotaExceeded, Throttled


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("InsufficientInstanceCapacity", OutOfCapacity),
        ("LimitExceeded", QuotaExceeded),
        ("VcpuLimitExceeded", QuotaExceeded),
        ("Throttling", Throttled),
        ("RequestLimitExceeded", Throttled),
        ("ScalingActivityInProgress", Throttled),
        ("ValidationError", AdapterError),
    ],
)
def test_aws_error_codes(code: str, expected: type[AdapterError]) -> None:
    exc = ClientError({"Error": {"Code": code, "Message": "m"}}, "SetDesiredCapacity")
    assert type(classify_aws(exc, "set")) is expected


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (gexc.Forbidden("Quota 'GPUS_ALL_REGIONS' exceeded.", errors=[{"reason": "quotaExceeded"}]), QuotaExceeded),
        (gexc.Forbidden("Rate Limit Exceeded", errors=[{"reason": "rateLimitExceeded"}]), Throttled),
        (gexc.TooManyRequests("Too many requests"), Throttled),
        (gexc.ResourceExhausted("Quota exceeded for quota metric 'Queries' and limit 'Queries per minute'"), Throttled),
        (gexc.ResourceExhausted("Quota 'NVIDIA_H100_GPUS' exceeded. Limit: 8.0 in region us-central1."), QuotaExceeded),
        (gexc.ServiceUnavailable("ZONE_RESOURCE_POOL_EXHAUSTED: no resources in us-central1-a"), OutOfCapacity),
        (gexc.NotFound("The resource was not found"), AdapterError),
    ],
    ids=["quota-reason", "rate-reason", "429", "per-minute-quota", "resource-quota", "stockout", "other"],
)  # fmt: skip
def test_gcp_call_errors(exc: gexc.GoogleAPICallError, expected: type[AdapterError]) -> None:
    assert type(classify_gcp(exc, "resize")) is expected


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        (["ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"], OutOfCapacity),
        (["QUOTA_EXCEEDED"], QuotaExceeded),
        (["RATE_LIMIT_EXCEEDED"], Throttled),
        (["CONDITION_NOT_MET"], None),
    ],
)
def test_gcp_operation_error_codes(codes: list[str], expected: type[AdapterError] | None) -> None:
    assert classify_gcp_codes(codes, "") is expected


@pytest.mark.parametrize(
    ("code", "message", "status", "expected"),
    [
        ("SkuNotAvailable", "The requested size is not available", 409, OutOfCapacity),
        ("AllocationFailed", "Allocation failed", 200, OutOfCapacity),
        ("QuotaExceeded", "Quota exceeded", 409, QuotaExceeded),
        ("OperationNotAllowed", "exceeding approved Cores quota", 409, QuotaExceeded),
        ("OperationNotAllowed", "scale set is being deleted", 409, AdapterError),
        ("TooManyRequests", "throttled", 429, Throttled),
        ("", "", 429, Throttled),
        ("ResourceNotFound", "not found", 404, AdapterError),
    ],
)
def test_azure_error_codes(
    code: str, message: str, status: int, expected: type[AdapterError]
) -> None:
    assert classify_azure_code(code, message, status) is expected


def test_azure_inner_error_codes_count() -> None:
    exc = HttpResponseError(message="deployment failed")
    exc.status_code = 409
    exc.error = ODataV4Format(
        {"error": {"code": "DeploymentFailed", "message": "see details",
                   "details": [{"code": "ZonalAllocationFailed", "message": "no capacity"}]}}
    )  # fmt: skip
    assert type(classify_azure(exc, "update")) is OutOfCapacity
