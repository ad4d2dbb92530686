"""``skyroute explain``: the router's ranking for one hypothetical request, as a table,
against the live tables (or the policy's defaults when no Redis URL is set); with
``--compare``, what each cost-aware baseline of the simulator would pick instead."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from live.redis_client import connect
from live.tables import LiveTables
from router.compiled import CompiledPolicy, route_key
from router.scoring import Ranking, RouteRequest, rank
from router.snapshot import Snapshot
from simulator.baselines import LeastLatencyBudget, LlmdWeighted
from skyroute.columns import cell


async def live_snapshot(policy: CompiledPolicy, redis_url: str, prefix: str) -> Snapshot:
    """Read the live tables once into a Snapshot. Raises TableError."""
    redis = connect(redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        now = time.time()
        rows = await LiveTables(redis, prefix=prefix).read(
            policy.pool_ids, int(now * 1000), replica_ttl_ms=3000
        )
        return Snapshot.build(policy, rows, now)
    finally:
        await redis.aclose()


def render(ranking: Ranking) -> str:
    """The ranking as a fixed-width table, tried pools first."""
    req = ranking.request
    header = (
        f"model={req.model} prompt_tokens={req.prompt_tokens} max_tokens={req.max_output_tokens} "
        f"slo={req.slo_class} (ttft<={ranking.slo_ttft_ms:.0f}ms "
        f"tpot<={ranking.slo_tpot_ms:.0f}ms) "
        f"client_region={req.client_region}\ndecision: {ranking.reason}\n"
    )
    cols = (
        f"{'#':>2}  {'pool':<36} {'ttft_ms':>8} {'tpot_ms':>8} {'cost_usd':>11} {'load':>6}  reason"
    )
    lines = [header, cols, "-" * len(cols)]
    tried = {int(i) for i in ranking.order}
    for n, entry in enumerate(ranking.explain(), start=1):
        idx = ranking.pool_ids.index(entry.pool_id)
        mark = str(n) if idx in tried else "x"
        lines.append(
            f"{mark:>2}  {entry.pool_id:<36} {cell(entry.ttft_ms, '8.0f')} "
            f"{cell(entry.tpot_ms, '8.1f')} "
            f"{cell(entry.cost_usd, '11.3e')} {cell(entry.load, '6.2f')}  {entry.reason}"
        )
    return "\n".join(lines)


def explain(
    policy: CompiledPolicy,
    request: RouteRequest,
    redis_url: str | None,
    prefix: str,
    compare: bool = False,
) -> str:
    """Rank ``request`` against the live tables (policy defaults without Redis); with
    ``compare``, add what each baseline would pick."""
    snapshot = (
        asyncio.run(live_snapshot(policy, redis_url, prefix))
        if redis_url
        else Snapshot.empty(policy)
    )
    ranking = rank(request, policy, snapshot)
    text = render(ranking)
    if compare:
        text += "\n\n" + render_compare(ranking, snapshot)
    return text


def baseline_picks(ranking: Ranking, snapshot: Snapshot) -> list[tuple[str, str, str]]:
    """(policy, pool id or "-", why) for skyroute and each cost-aware baseline of
    ``simulator.baselines``, judged on the same snapshot: the pools ``ranking`` found
    eligible, their $/token, in-flight requests and batch slots. A snapshot carries no
    failure history, so LiteLLM's cost routing has no pool cooling down here."""
    view = snapshot.views[route_key(ranking.request.model, ranking.request.version)]
    cands = np.flatnonzero(ranking.local_eligible)
    out = [("skyroute", ranking.pool_ids[int(ranking.order[0])] if len(ranking.order) else "-",
            ranking.reason)]  # fmt: skip
    if len(cands) == 0:
        return out + [(name, "-", "no eligible pool") for name in _BASELINES]
    ids = [ranking.pool_ids[int(view.members[j])] for j in cands]
    price = ranking.local_usd_per_token[cands]
    slots = np.divide(1.0, view.inv_slots[cands], out=np.zeros(len(cands)),
                      where=view.inv_slots[cands] > 0)  # fmt: skip
    inflight = view.inflight[cands]
    free = inflight < slots
    if free.any():
        j = int(np.flatnonzero(free)[np.argmin(price[free])])
        out.append(("cheapest-free-slot", ids[j], "cheapest pool with a free batch slot"))
    else:
        waiting = np.maximum(inflight - slots, 0.0)
        j = int(np.argmin(waiting + price / max(float(price.max()), 1e-300) * 1e-9))
        out.append(("cheapest-free-slot", ids[j], "no free slot: fewest waiting"))
    j = int(np.argmin(price))
    out.append(("litellm-cost-cooldown", ids[j], "cheapest pool (none cooling down)"))
    waiting = np.maximum(inflight - slots, 0.0)
    queue = 1.0 - waiting / waiting.max() if waiting.max() > 0 else np.ones(len(cands))
    use = np.clip(np.divide(inflight, slots, out=np.ones(len(cands)), where=slots > 0), 0, 1)
    score = LlmdWeighted.queue_weight * queue + LlmdWeighted.kv_weight * (1.0 - use)
    j = int(np.argmax(score))
    out.append(("llm-d-weighted", ids[j], f"highest queue + KV score ({score[j]:.2f})"))
    budget = price <= LeastLatencyBudget.budget_factor * price.min()
    ttft = snapshot.ttft_ms[view.members[cands]]
    latency = np.where(np.isnan(ttft), 0.0, ttft)  # unmeasured goes first, as in LiteLLM
    j = int(np.flatnonzero(budget)[np.argmin(latency[budget])])
    out.append(("least-latency-budget", ids[j], "least latency within 1.5x the cheapest price"))
    return out


_BASELINES = ("cheapest-free-slot", "litellm-cost-cooldown", "llm-d-weighted",
              "least-latency-budget")  # fmt: skip


def render_compare(ranking: Ranking, snapshot: Snapshot) -> str:
    """``baseline_picks`` as a fixed-width table."""
    lines = [f"{'policy':<22} {'pool':<36} why", "-" * 80]
    for name, pool, why in baseline_picks(ranking, snapshot):
        lines.append(f"{name:<22} {pool:<36} {why}")
    return "\n".join(lines)
