"""The validation gate: golden requests sent to a new version's pools before any user
traffic, each answer checked (a valid OpenAI answer, then the plan's checks).

Every golden request goes to every pool of the version (to one endpoint of each: the
live replicas table's, else the policy's), so a pool with a broken engine build fails
the gate even if another pool of the version is fine. Off the request path: httpx.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

from router.policy import PoolSpec
from router.rollout_plan import GoldenRequest, ValidationGate

# The longest one golden request may take without a max_latency_ms check (s).
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class GateResult:
    """How many (request, pool) checks failed, of how many, and one line per check."""

    failures: int
    checked: int
    report: tuple[str, ...]


def _check(golden: GoldenRequest, status: int, body: bytes, elapsed_ms: float) -> str | None:
    """Why the answer fails ``golden``'s checks, or None if it passes."""
    if status != 200:
        return f"answered HTTP {status}"
    try:
        content = json.loads(body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return "not a chat completion"
    if not isinstance(content, str):
        return "no message content"
    checks = golden.checks
    if checks.valid_json:
        try:
            json.loads(content)
        except ValueError:
            return f"content is not JSON: {content[:60]!r}"
    missing = [s for s in checks.contains if s not in content]
    if missing:
        return f"content lacks {missing}"
    if checks.max_latency_ms is not None and elapsed_ms > checks.max_latency_ms:
        return f"took {elapsed_ms:.0f} ms > {checks.max_latency_ms:.0f} ms"
    return None


async def run_gate(
    gate: ValidationGate,
    pools: Sequence[PoolSpec],
    endpoints: Mapping[str, str],
    client: httpx.AsyncClient,
) -> GateResult:
    """Send each golden request to each pool (at ``endpoints[pool.id]``, else its first
    policy endpoint) and check the answers. Never raises for an engine's failure: a
    refused connection or a timeout is a failed check."""
    lines: list[str] = []
    failures = checked = 0
    if not gate.requests:
        return GateResult(1, 0, ("no golden requests: the plan's file was not read in",))
    if not pools:
        return GateResult(1, 0, ("the new version has no pool",))
    for pool in pools:
        base = endpoints.get(pool.id) or str(pool.endpoints[0]).rstrip("/")
        for i, golden in enumerate(gate.requests):
            name = golden.name or f"#{i}"
            timeout = (golden.checks.max_latency_ms or DEFAULT_TIMEOUT_S * 1000) / 1000 * 2
            body = {"model": pool.upstream_model, "messages": golden.messages,
                    "max_tokens": golden.max_tokens, "stream": False}  # fmt: skip
            started = time.perf_counter()
            try:
                resp = await client.post(f"{base}/v1/chat/completions", json=body, timeout=timeout)
                why = _check(golden, resp.status_code, resp.content,
                             (time.perf_counter() - started) * 1000)  # fmt: skip
            except httpx.HTTPError as exc:
                why = f"{type(exc).__name__}: {exc}"
            checked += 1
            if why is not None:
                failures += 1
                lines.append(f"{pool.id} {name}: FAIL: {why}")
            else:
                lines.append(f"{pool.id} {name}: ok")
    return GateResult(failures, checked, tuple(lines))
