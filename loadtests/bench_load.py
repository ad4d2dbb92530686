"""The benchmarks' shared workload: one model on six pools (aws, gcp, azure) that all point
at the same simulated engine, the request every benchmark sends, and the closed- and
open-loop load generators that send it.

``bench_overhead.py``, ``bench_peers.py`` and ``bench_ab.py`` use it, so their gateways
run the same policy and their figures can be set side by side.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml

MODEL = "bench-model"
UPSTREAM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PROFILE = "h100-llama-3.1-8b"
PROMPT = (
    "You are a routing benchmark. Summarise in one sentence why a multi-cloud gateway "
    "should send each request to the cheapest GPU pool that still meets its latency SLO, "
    "and name one risk of doing so."
)
MAX_TOKENS = 16
REQUEST_TIMEOUT_S = 10.0
MAX_RPS = 50_000  # count bound of every loop: duration x this
# provider, region, GPU, instance, purchase, $/GPU-hour, tokens/s, prefill tokens/s,
# max concurrency, TPOT ms (1 GPU per replica, Llama-3.1-8B-class goodput). Prices are in the
# range of public list prices (on-demand or spot), not a live feed.
POOLS = [
    ("aws", "us-east-1", "H100", "p5.48xlarge", "on_demand", 6.88, 6000, 25000, 256, 9),
    ("aws", "us-west-2", "A10G", "g5.xlarge", "spot", 0.4526, 450, 3500, 16, 38),
    ("gcp", "us-central1", "L4", "g2-standard-4", "spot", 0.3973, 320, 2500, 12, 52),
    ("gcp", "us-east4", "A100-80GB", "a2-ultragpu-1g", "on_demand", 5.0688, 2200, 16000, 64, 18),
    ("azure", "eastus", "A100-80GB", "Standard_NC24ads_A100_v4", "on_demand", 3.673, 2200,
     16000, 64, 18),
    ("azure", "westus3", "H100", "Standard_NC40ads_H100_v5", "on_demand", 6.98, 6000, 25000,
     256, 9),
]  # fmt: skip
RTT_MS = {
    "aws:us-east-1": {"aws:us-east-1": 1.0, "aws:us-west-2": 62.0, "gcp:us-central1": 28.5,
                      "gcp:us-east4": 2.4, "azure:eastus": 1.9, "azure:westus3": 58.0},
    "gcp:us-central1": {"aws:us-east-1": 41.9, "aws:us-west-2": 38.0, "gcp:us-central1": 1.0,
                        "gcp:us-east4": 27.0, "azure:eastus": 35.7, "azure:westus3": 44.0},
}  # fmt: skip


def write_policy(path: Path, engine_urls: list[str], prefix_affinity: bool = False) -> None:
    pools = []
    for prov, region, gpu, inst, purchase, price, tps, prefill, conc, tpot in POOLS:
        suffix = "-spot" if purchase == "spot" else ""
        pools.append({
            "id": f"{prov}:{region}:{gpu.lower()}-bench{suffix}", "provider": prov,
            "region": region, "model": MODEL, "upstream_model": UPSTREAM_MODEL,
            "gpu_type": gpu, "gpus_per_replica": 1, "endpoints": engine_urls,
            "price": {"source": "policy", "instance_type": inst, "purchase": purchase,
                      "usd_per_gpu_hour": price},
            "goodput": {"tokens_per_s": tps, "prefill_tokens_per_s": prefill,
                        "max_concurrency": conc, "tpot_ms": tpot},
            "replicas": {"min": 0, "max": 8, "initial": 2},
        })  # fmt: skip
    policy = {
        "version": 1,
        "slo_classes": {"interactive": {"ttft_ms": 800, "tpot_ms": 60},
                        "batch": {"ttft_ms": 30000, "tpot_ms": 500}},
        "models": {MODEL: {"kind": "chat", "default_slo": "interactive",
                           "expected_output_tokens": 129,
                           "prefix_affinity": prefix_affinity}},
        "pools": pools,
        "client_regions": {name: {"rtt_ms": rtt} for name, rtt in RTT_MS.items()},
        "routing": {"default_client_region": "aws:us-east-1", "fallback": "fastest",
                    "near_tie": 0.02, "max_attempts": 3},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(policy, sort_keys=False))


@dataclass
class Load:
    url: str
    headers: dict[str, str]
    body: bytes
    stream: bool
    pools: Counter[str] | None = None

    @classmethod
    def chat(cls, base_url: str, key: str, stream: bool) -> Load:
        """The benchmarks' one chat request (``PROMPT``, ``MAX_TOKENS``, model ``MODEL``)
        to ``base_url``, with API key ``key``."""
        payload = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}],
                   "max_tokens": MAX_TOKENS, "stream": stream}  # fmt: skip
        headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
        return cls(base_url + "/v1/chat/completions", headers, json.dumps(payload).encode(), stream)


class Tally:
    """Latencies (s) of complete 200 answers and a count of everything else."""

    def __init__(self) -> None:
        self.lat: list[float] = []
        self.errors = 0
        self.start = time.perf_counter()
        self.seconds = 0.0
        self.first_error = ""

    async def send(self, session: aiohttp.ClientSession, load: Load, t0: float) -> None:
        """Send one request and read the whole body; latency counts from ``t0``."""
        try:
            async with session.post(load.url, data=load.body, headers=load.headers) as resp:
                data = await resp.read()
                if load.pools is not None:
                    load.pools[resp.headers.get("x-skyroute-pool", "?")] += 1
                ok = resp.status == 200 and (not load.stream or b"data: [DONE]" in data)
                problem = "" if ok else f"HTTP {resp.status}: {data[-300:]!r}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            ok, problem = False, repr(exc)
        if ok:
            self.lat.append(time.perf_counter() - t0)
        else:
            self.errors += 1
            self.first_error = self.first_error or problem


async def closed_loop(
    session: aiohttp.ClientSession, load: Load, concurrency: int, seconds: float
) -> Tally:
    """``concurrency`` workers back to back until time or count runs out."""
    tally = Tally()
    deadline, cap = tally.start + seconds, int(seconds * MAX_RPS)

    async def worker() -> None:
        while time.perf_counter() < deadline and len(tally.lat) + tally.errors < cap:
            await tally.send(session, load, time.perf_counter())

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    tally.seconds = time.perf_counter() - tally.start
    return tally


async def open_loop(
    session: aiohttp.ClientSession, load: Load, rate: float, seconds: float
) -> Tally:
    """``rate`` requests/s for ``seconds``; latency counts from each scheduled send time."""
    tally = Tally()
    tasks: list[asyncio.Task[None]] = []
    for i in range(int(rate * seconds)):
        scheduled = tally.start + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(tally.send(session, load, scheduled)))
    _, pending = await asyncio.wait(tasks, timeout=REQUEST_TIMEOUT_S + 1)
    for task in pending:
        task.cancel()
    tally.errors += len(pending)
    tally.seconds = time.perf_counter() - tally.start
    return tally
