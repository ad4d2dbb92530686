"""The gateway process's settings: every one from a ``SKYROUTE_`` environment variable.

Built once in the entry point and passed down; nothing reads the environment later.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class GatewaySettings(BaseSettings):
    """Settings of one gateway process (env prefix ``SKYROUTE_``).

    ``redis_url`` unset means the entry point starts an embedded Redis; ``database_url``
    unset means an embedded SQLite file (``store.url.default_database_url``). ``api_key``
    is the client credential and ``admin_token`` the admin one; both are kept only
    hashed once the app is built and never logged.
    """

    model_config = SettingsConfigDict(env_prefix="SKYROUTE_", extra="ignore")

    redis_url: str | None = None
    redis_prefix: str = "sr:v1"
    # The system of record: postgresql+asyncpg://... or sqlite+aiosqlite:///file.db;
    # unset, an embedded SQLite file in the user's data directory (store.url).
    database_url: str | None = None
    # Where the store's background work runs (gateway.store_sync): "inline", in every
    # gateway replica; "external", in a ``skyroute store-worker`` process of its own
    # (the gateway then opens the store only for admin calls, and must not be run
    # without a worker: usage would wait in Redis and no refill would happen).
    store_worker: Literal["inline", "external"] = "inline"
    policy: Path = Path("policy.yaml")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    api_key: SecretStr | None = None
    admin_token: SecretStr | None = None
    replica_id: str = Field(default_factory=_default_replica_id)
    # The usage journal's directory (gateway.usage_journal), one file per replica id
    # under a subdirectory per redis_prefix: a restart under the same id, or another
    # replica sharing the directory, replays what a killed process had not flushed.
    # Unset: $XDG_DATA_HOME/skyroute/journal (~/.local/share/skyroute/journal).
    usage_journal_dir: Path | None = None
    # Request body limit in bytes (413 above it).
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    # Request header limit in bytes (431 above it).
    max_header_bytes: int = Field(default=16 * 1024, gt=0)
    # Background snapshot refresh period; the DESIGN bound is 250 ms.
    snapshot_interval_ms: int = Field(default=100, gt=0, le=250)
    # In-flight counts and observations are flushed to Redis in one pipeline this often.
    flush_interval_ms: int = Field(default=50, gt=0, le=1000)
    # Usage and demand records go out with a flush once this old (or once a batch of
    # them waits): budgets and the ledger see a request at most this late, and a batch
    # costs a few Redis commands whatever the number of gateway replicas serves it.
    usage_flush_interval_ms: int = Field(default=1000, gt=0, le=5000)
    # Demand telemetry resolution (s, a divisor of a day); the autoscaler must read with
    # the same SKYROUTE_AUTOSCALE_DEMAND_BUCKET_S. The demo uses 5 s to scale fast.
    demand_bucket_s: int = Field(default=60, gt=0, le=86400)
    # A gateway replica's in-flight share expires this long after its last flush.
    replica_ttl_ms: int = Field(default=3000, gt=0)
    # How often the policy file's mtime is checked for a reload.
    policy_poll_s: float = Field(default=1.0, gt=0)
    # SIGTERM: /readyz fails at once, new connections stop after drain_delay_s, in-flight
    # requests and streams get up to shutdown_timeout_s to finish.
    drain_delay_s: float = Field(default=2.0, ge=0)
    shutdown_timeout_s: int = Field(default=30, gt=0)
    # The front door (skyroute.front_door): a request's headers must arrive within
    # header_timeout_s of its first byte and its body within body_timeout_s of the
    # headers (408 otherwise); idle keep-alive connections close after
    # keepalive_timeout_s; at most max_connections client connections per process
    # (lowered to fit the open-file limit).
    header_timeout_s: float = Field(default=10.0, gt=0)
    body_timeout_s: float = Field(default=30.0, gt=0)
    keepalive_timeout_s: int = Field(default=5, gt=0)
    max_connections: int = Field(default=4096, ge=16)
    log_level: str = "INFO"
    log_json: bool = True
