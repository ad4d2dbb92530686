"""The sidecar process's settings: every one from a ``SKYROUTE_`` environment variable.

Built once in the entry point (``skyroute autoscale``) and passed down; nothing reads
the environment later. Names shared with the gateway (``SKYROUTE_REDIS_URL``,
``SKYROUTE_REDIS_PREFIX``, ``SKYROUTE_POLICY``, ``SKYROUTE_REPLICA_TTL_MS``) mean the
same thing, so one ConfigMap serves both containers of a pod.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from adapters.cloud import AwsSettings, AzureSettings, CloudConfig, GcpSettings, LocalSettings
from autoscaler.config import DEFAULT_HEADROOM, ScalerConfig
from autoscaler.forecast import ForecastConfig

__all__ = ["AutoscalerSettings"]


def _holder() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class AutoscalerSettings(BaseSettings):
    """Settings of one autoscaler sidecar (env prefix ``SKYROUTE_``).

    Durations in seconds unless the name says ms; money in USD/hour. Cloud endpoints
    default to each SDK's own resolution; tests point them at local fakes.
    """

    model_config = SettingsConfigDict(env_prefix="SKYROUTE_", extra="ignore")

    redis_url: str | None = None
    redis_prefix: str = "sr:v1"
    # The system of record the rollouts are kept in (the gateway's; unset: the same
    # embedded SQLite file the gateway uses, ``store.url.default_database_url``).
    database_url: str | None = None
    policy: Path = Path("policy.yaml")
    # How often the policy file is looked at for a change (the same setting as the gateway's).
    policy_poll_s: float = Field(default=1.0, gt=0)
    # A gateway replica's in-flight share counts while its heartbeat is this fresh.
    replica_ttl_ms: int = Field(default=3000, gt=0)
    log_level: str = "INFO"
    log_json: bool = True

    autoscale_interval_s: float = Field(default=60.0, gt=0)
    autoscale_dry_run: bool = False
    autoscale_budget_usd_per_hour: float | None = Field(default=None, ge=0)
    autoscale_headroom: float = Field(default=DEFAULT_HEADROOM, ge=1)
    autoscale_spot_cap: float = Field(default=0.5, ge=0, le=1)
    autoscale_max_step: int = Field(default=4, ge=1)
    autoscale_cooldown_s: float = Field(default=300.0, ge=0)
    autoscale_scale_down_window_s: float = Field(default=600.0, ge=0)
    autoscale_quantile: float = Field(default=0.95, gt=0.5, lt=1)
    autoscale_forecast_bucket_s: float = Field(default=300.0, gt=0)
    autoscale_history_s: float = Field(default=14 * 86_400.0, gt=0)
    autoscale_demand_bucket_s: int = Field(default=60, gt=0)
    autoscale_lease_ttl_ms: int = Field(default=15_000, ge=300)
    autoscale_holder: str = Field(default_factory=_holder, pattern=r"^[^|]+$")
    # After a cordon, in-flight zero counts only once this has passed (> snapshot
    # refresh + flush interval of the gateways).
    autoscale_drain_settle_s: float = Field(default=1.0, ge=0)

    aws_endpoint_url: str | None = None
    aws_profile: str | None = None
    gcp_api_endpoint: str | None = None
    gcp_anonymous: bool = False
    azure_base_url: str | None = None
    azure_ca_bundle: str | None = None
    azure_polling_interval_s: float = Field(default=5.0, gt=0)
    local_time_scale: float = Field(default=1.0, ge=0)
    # Serve a provider's pools with another adapter, e.g. {"aws": "local"} (JSON).
    cloud_adapter_for: dict[str, str] = {}

    def scaler_config(self) -> ScalerConfig:
        """The planner's knobs."""
        return ScalerConfig(
            headroom=self.autoscale_headroom,
            budget_usd_per_hour=self.autoscale_budget_usd_per_hour,
            spot_cap=self.autoscale_spot_cap,
            max_step=self.autoscale_max_step,
            cooldown_s=self.autoscale_cooldown_s,
            scale_down_window_s=self.autoscale_scale_down_window_s,
            interval_s=self.autoscale_interval_s,
            forecast_bucket_s=self.autoscale_forecast_bucket_s,
            history_s=self.autoscale_history_s,
            forecast=ForecastConfig(quantile=self.autoscale_quantile),
        )

    def cloud_config(self) -> CloudConfig:
        """Settings for every cloud provider."""
        return CloudConfig(
            aws=AwsSettings(endpoint_url=self.aws_endpoint_url, profile=self.aws_profile),
            gcp=GcpSettings(api_endpoint=self.gcp_api_endpoint, anonymous=self.gcp_anonymous),
            azure=AzureSettings(
                base_url=self.azure_base_url,
                connection_verify=self.azure_ca_bundle or True,
                polling_interval_s=self.azure_polling_interval_s,
            ),
            local=LocalSettings(time_scale=self.local_time_scale),
            adapter_for=dict(self.cloud_adapter_for),
        )
