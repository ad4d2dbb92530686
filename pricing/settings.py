"""Settings of the price-feed process (``skyroute prices …``, or the sidecar): every one
from a ``SKYROUTE_`` environment variable. Built once in the entry point, passed down.

AWS endpoints and credentials are not here: boto3 reads the standard variables itself
(``AWS_ENDPOINT_URL_EC2``, ``AWS_ENDPOINT_URL_PRICING``, ``AWS_ACCESS_KEY_ID``…).
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from pricing.azure import DEFAULT_URL as AZURE_PRICES_URL


def _default_holder() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class PriceFeedSettings(BaseSettings):
    """Settings of one price-feed process (env prefix ``SKYROUTE_``).

    ``price_feeds`` is a comma-separated list of the feeds to run (aws, gcp, azure,
    static). ``gcp_anonymous`` sends no Google credentials: for a local endpoint only.
    Times are seconds; ``price_metrics_port`` 0 serves no metrics endpoint.
    """

    model_config = SettingsConfigDict(env_prefix="SKYROUTE_", extra="ignore")

    redis_url: str | None = None
    redis_prefix: str = "sr:v1"
    policy: Path = Path("policy.yaml")
    price_feeds: str = "aws,gcp,azure,static"
    # Lease holder id of this process; unique per sidecar.
    sidecar_id: str = Field(default_factory=_default_holder, pattern=r"^[^|]+$")
    feed_timeout_s: float = Field(default=10.0, gt=0)
    azure_prices_url: str = AZURE_PRICES_URL
    gcp_billing_endpoint: str | None = None
    gcp_api_key: SecretStr | None = None
    gcp_anonymous: bool = False
    aws_pricing_region: str = "us-east-1"
    aws_max_attempts: int = Field(default=3, ge=1, le=10)
    # A crashed leader blocks the others at most this long.
    price_lease_ttl_s: float = Field(default=30.0, gt=0)
    # First retry after a failed fetch; doubles per failure up to the refresh interval.
    price_backoff_base_s: float = Field(default=5.0, gt=0)
    price_metrics_port: int = Field(default=0, ge=0, le=65535)
    log_level: str = "INFO"
    log_json: bool = True

    @property
    def feed_names(self) -> list[str]:
        """The enabled feeds, in the order given."""
        return [n.strip() for n in self.price_feeds.split(",") if n.strip()]
