"""Who is calling and may they: API keys, tenants, rate limits and budgets.

A request is admitted with at most ONE Redis round trip (``AccessTables.admit``: the
key, then its tenant's RPM/TPM token buckets and spend budget, atomically, shared by
every gateway replica). Tenants with limits pay that round trip on every request; for
tenants without limits a key's verdict is reused for ``FRESH_S`` (0.5 s), so a revoked
key stops working everywhere within half a second (plus the re-check's round trip).
Once a verdict is stale, ONE re-check per key goes to Redis and the requests that
arrive while it runs wait for its answer instead of sending their own: at 3,000 req/s
on 128 connections a third of all requests used to re-check a key at once, each round
trip slowing the event loop that the next ones waited on. If
Redis is unreachable, keys this replica admitted before keep working (limits are then
not enforced) and unknown keys get a 503: a key cannot be checked without the table.

Tenants come from the policy, overridden by those set through the admin API; the
bootstrap key (``SKYROUTE_API_KEY``) belongs to the tenant ``default``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from base.auth_digest import digest_hex
from base.errors import AuthenticationError, RateLimited, StoreError, TableError
from live.access_table import AccessTables, AdmitCode, KeyRecord
from router.policy import Policy, TenantSpec

logger = logging.getLogger(__name__)

DEFAULT_TENANT = "default"
# A key of a tenant without rate limits or budget is re-checked in Redis at most this
# often (seconds), so revocation reaches every replica well within a second while the
# common request makes no Redis round trip at all.
FRESH_S = 0.5
BOOTSTRAP_KEY_ID = "bootstrap"


@dataclass(frozen=True)
class Caller:
    """An admitted caller: its tenant (name and spec) and key id (never the secret)."""

    tenant: str
    spec: TenantSpec
    key_id: str


def bearer_digest(authorization: str | None) -> str:
    """The SHA-256 (hex) of a ``Bearer`` token. Raises AuthenticationError."""
    if not authorization:
        raise AuthenticationError(
            "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'."
        )
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationError("Incorrect Authorization header: expected 'Bearer <key>'.")
    return digest_hex(token)


def _limited(spec: TenantSpec) -> bool:
    """Whether every request of this tenant must be admitted in Redis (shared limits)."""
    return spec.rpm is not None or spec.tpm is not None or spec.budget_usd is not None


def _budget_retry_after(spec: TenantSpec, now: float) -> float:
    t = datetime.fromtimestamp(now, UTC)
    if spec.budget_period == "hour":
        end = t.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    elif spec.budget_period == "day":
        end = t.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    else:
        first = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = (first + timedelta(days=32)).replace(day=1)
    return max((end - t).total_seconds(), 1.0)


class AccessControl:
    """Admits requests and keeps the effective tenant table of one gateway replica."""

    def __init__(
        self,
        tables: AccessTables,
        policy: Policy,
        bootstrap_secret: str | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tables = tables
        self._clock = clock  # unix seconds: admissions, key expiries, verdict ages
        self._policy = policy
        self._overrides: dict[str, TenantSpec] = {}
        self.tenants: dict[str, TenantSpec] = {}
        self._bootstrap = digest_hex(bootstrap_secret) if bootstrap_secret else None
        self._admitted: dict[str, tuple[str, str, float]] = {}
        # Recent verdicts for keys of tenants without limits: (caller, checked at, expiry).
        self._fresh: dict[str, tuple[Caller, float, float]] = {}
        # The re-check in flight of each key whose cached verdict went stale.
        self._rechecks: dict[str, asyncio.Task[Caller]] = {}
        # Called (without waiting) when Redis has evidently lost the key table.
        self.on_data_loss: Callable[[], None] | None = None
        # Whether Redis holds the store's last refill (None: no store to refill from).
        self.filled: Callable[[], Awaitable[bool]] | None = None
        # Puts a key Redis does not know back from the store; True if the store had it
        # (Redis evicted it: an unknown key is then a refill, never a wrong 401).
        self.lookup_key: Callable[[str], Awaitable[bool]] | None = None
        self._admit_failing = False
        self._recompute()

    def _recompute(self) -> None:
        tenants = {DEFAULT_TENANT: TenantSpec(), **self._policy.tenants, **self._overrides}
        self.tenants = tenants

    def tenant(self, name: str) -> TenantSpec:
        """A tenant's effective spec (unlimited defaults for an unknown name)."""
        return self.tenants.get(name) or TenantSpec()

    async def publish(self) -> None:
        """Write the bootstrap key and every tenant's limits to Redis. Idempotent."""
        if self._bootstrap:
            record = KeyRecord(
                BOOTSTRAP_KEY_ID, DEFAULT_TENANT, "SKYROUTE_API_KEY", time.time(), 0.0, False
            )
            await self.tables.store_key(self._bootstrap, record)
        await self.tables.write_limits(self.tenants)

    async def on_policy(self, policy: Policy) -> None:
        """A new policy is running: its tenants apply from now on."""
        self._policy = policy
        self._recompute()
        await self.publish()

    async def refresh(self) -> None:
        """Re-read the admin-API tenants; publish limits if anything changed."""
        overrides = await self.tables.tenant_overrides()
        if overrides != self._overrides and self.filled is not None and not await self.filled():
            # Redis lost its data and waits for the store's refill: its (missing) tenants
            # are not a change to apply. The refill calls refresh again.
            if self.on_data_loss is not None:
                self.on_data_loss()
            return
        if overrides != self._overrides:
            self._overrides = overrides
            self._recompute()
            await self.tables.write_limits(self.tenants)

    async def refresh_loop(self, interval_s: float = 1.0) -> None:
        """Loop: keep admin-API tenant changes in step across replicas."""
        while True:
            await asyncio.sleep(interval_s)
            # The sync loops already report Redis outages.
            with contextlib.suppress(TableError):
                await self.refresh()

    async def _restored(self, digest_hex: str, retry: bool = True) -> bool:
        if not retry or self.lookup_key is None:
            return False
        try:
            return await self.lookup_key(digest_hex)
        except (StoreError, TableError) as exc:
            logger.warning("unknown key not looked up in the store: %s", exc)
            return False

    async def admit(self, digest_hex: str, est_tokens: int, *, _retry: bool = True) -> Caller:
        """Admit one request, charging its tenant's limits. Raises AuthenticationError,
        RateLimited, or TableError (Redis down and the key never seen here).

        A key Redis does not know is looked up in the store (``lookup_key``) once: one
        that Redis evicted is put back and admitted, not refused."""
        now = self._clock()
        fresh = self._fresh.get(digest_hex)
        if fresh is not None:
            caller, checked_s, expires_s = fresh
            # Only tenants without limits are cached; a key's expiry still applies.
            if (not expires_s or expires_s > now) and not _limited(self.tenant(caller.tenant)):
                if now - checked_s < FRESH_S:
                    return caller
                # Stale: one re-check for all (an unlimited tenant's admission charges
                # nothing per request, so its verdict is the same for every waiter). A
                # task of its own, so that a waiter cancelled (its client gone) does not
                # cancel it for the others.
                recheck = self._rechecks.get(digest_hex)
                if recheck is None:
                    recheck = asyncio.ensure_future(self._admit(digest_hex, est_tokens, now))
                    self._rechecks[digest_hex] = recheck
                    recheck.add_done_callback(lambda t: self._recheck_done(digest_hex, t))
                return await asyncio.shield(recheck)
        return await self._admit(digest_hex, est_tokens, now, _retry=_retry)

    def _recheck_done(self, digest_hex: str, task: asyncio.Task[Caller]) -> None:
        if self._rechecks.get(digest_hex) is task:
            del self._rechecks[digest_hex]
        if not task.cancelled():
            task.exception()  # retrieved: every waiter may have gone

    async def _admit(
        self, digest_hex: str, est_tokens: int, now: float, *, _retry: bool = True
    ) -> Caller:
        """``admit`` in Redis (no cached verdict used)."""
        try:
            verdict = await self.tables.admit(digest_hex, now, est_tokens)
        except TableError as exc:
            if not self._admit_failing:
                # The first of a run of failures is logged with its cause (a wrong URL, a
                # CROSSSLOT or NOSCRIPT must not hide behind 503s); repeats are not.
                self._admit_failing = True
                cause = exc.__cause__ or exc
                logger.warning("admission in redis failed (%s: %s)", type(cause).__name__, exc)
            if digest_hex == self._bootstrap:
                return Caller(DEFAULT_TENANT, self.tenant(DEFAULT_TENANT), BOOTSTRAP_KEY_ID)
            known = self._admitted.get(digest_hex)
            if known is None or (known[2] and known[2] <= now):
                raise
            tenant, key_id, _ = known
            return Caller(tenant, self.tenant(tenant), key_id)
        self._admit_failing = False
        code = verdict.code
        if code == AdmitCode.UNKNOWN and digest_hex == self._bootstrap:
            # Redis lost its data (or came up after us): put the bootstrap key back.
            await self.publish()
            return await self._admit(digest_hex, est_tokens, self._clock())
        if code == AdmitCode.UNKNOWN:
            known = self._admitted.get(digest_hex)
            if (known is None or (known[2] and known[2] <= now)) and await self._restored(
                digest_hex, _retry
            ):
                return await self._admit(digest_hex, est_tokens, self._clock(), _retry=False)
            if known is None or (known[2] and known[2] <= now):
                raise AuthenticationError("Incorrect API key provided.")
            # Keys are revoked, never deleted: Redis not knowing a key this replica has
            # admitted means Redis lost its data. Serve the key from memory, as while
            # Redis is down, and have the store refill Redis now.
            if self.on_data_loss is not None:
                self.on_data_loss()
            tenant, key_id, _ = known
            return Caller(tenant, self.tenant(tenant), key_id)
        if code == AdmitCode.REVOKED:
            self._admitted.pop(digest_hex, None)
            raise AuthenticationError("This API key has been revoked.")
        if code == AdmitCode.EXPIRED:
            self._admitted.pop(digest_hex, None)
            raise AuthenticationError("This API key has expired.")
        spec = self.tenant(verdict.tenant)
        if code in (AdmitCode.RPM, AdmitCode.TPM):
            what = "requests" if code == AdmitCode.RPM else "tokens"
            limit = spec.rpm if code == AdmitCode.RPM else spec.tpm
            raise RateLimited(
                f"Rate limit reached for tenant {verdict.tenant}: {limit} {what} per minute.",
                retry_after_s=max(verdict.retry_after_s, 0.001),
            )
        if code == AdmitCode.BUDGET:
            raise RateLimited(
                f"Tenant {verdict.tenant} has used its budget of ${spec.budget_usd} "
                f"for this {spec.budget_period}.",
                retry_after_s=math.ceil(_budget_retry_after(spec, now)),
                code="insufficient_quota",
            )
        if len(self._admitted) > 100_000:
            self._admitted.clear()
        self._admitted[digest_hex] = (verdict.tenant, verdict.key_id, verdict.expires_s)
        caller = Caller(verdict.tenant, spec, verdict.key_id)
        # A tenant this replica does not know yet (created through another replica less
        # than a refresh ago) may have limits: only known unlimited tenants are cached.
        if verdict.tenant in self.tenants and not _limited(spec):
            if len(self._fresh) > 100_000:
                self._fresh.clear()
            self._fresh[digest_hex] = (caller, now, verdict.expires_s)
        return caller
