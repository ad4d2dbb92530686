"""Fault benchmark: steady open-loop load through one gateway while one thing goes wrong
at a time, and what the clients saw. Prints one table; numbers only, nothing asserted.

    python loadtests/bench_faults.py [--rate 20] [--fault-s 8] [--hedge] [--only CASE ...]

Everything runs on 127.0.0.1: Redis (``SKYROUTE_REDIS_URL`` or an embedded one), three
simulated engines in real time (``cheap`` gcp $0.40, ``mid`` aws $1.00, ``pricey``
azure $3.00 per GPU-hour) serving ``chat-model``, and one ``skyroute serve`` with the
policy defaults (health, outlier, deadlines). The malformed-answer cases send their load
to ``odd-model`` instead, whose cheapest pool (``odd``, $0.20) is a scripted upstream (a
load balancer that answers correctly until its case makes it misbehave), with pools on
the ``cheap`` and ``mid`` engines behind it.

Each case: ``--warm-s`` of load, the fault for ``--fault-s``, then ``--after-s`` more.
Per case it prints the requests sent during the fault window (fault start to its end
plus ``--after-s``), the client-visible failures among them, those answered but slow
(over twice the TTFT SLO: 1.6 s for a non-streaming request of 8 tokens), p50/p99
latency during the fault, and the time to recover: from the fault's start to the start
of the last request that failed or was slow, 0 if none did. Streams count as failed if
they end with an error event or without ``[DONE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import yaml
from aiohttp import web

from skyroute.embedded_redis import free_port, redis_url_or_embedded

# ``python loadtests/bench_faults.py`` puts this directory, not the project, on sys.path.
_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from loadtests.bench_procs import stop_on_sigterm  # noqa: E402

MODEL = "chat-model"
ODD_MODEL = "odd-model"
UPSTREAM = "upstream-chat"
PROFILE = "a10g-llama-3.1-8b"
API_KEY = "sk-bench-faults-" + "0" * 16
ADMIN = "sk-bench-admin-" + "0" * 16
TTFT_SLO_S = 0.8
SLOW_S = 2 * TTFT_SLO_S
MAX_REQUESTS = 20_000  # count bound of every load loop
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "fault bench"}], "max_tokens": 8}
ODD_CHUNK = (
    b'data: {"id":"x","object":"chat.completion.chunk","created":0,"model":"upstream-chat",'
    b'"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
)


class OddUpstream:
    """An OpenAI-shaped upstream whose answers a case switches (``mode``): ``ok`` (a
    correct one-token answer), ``html``, ``array``, ``truncated`` (a stream without
    ``[DONE]``)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.port = free_port()

    async def start(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._health)
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        return runner

    async def _health(self, _: web.Request) -> web.StreamResponse:
        return web.json_response({"status": "ok"})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if self.mode == "html":
            return web.Response(text="<html>502 Bad Gateway</html>", content_type="text/html")
        if self.mode == "array":
            return web.json_response([])
        if body.get("stream"):
            resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(ODD_CHUNK)
            if self.mode != "truncated":
                await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        return web.json_response({
            "id": "x", "object": "chat.completion", "created": 0, "model": UPSTREAM,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        })  # fmt: skip


@dataclass
class Row:
    case: str
    requests: int
    failures: int
    p50_ms: float
    p99_ms: float
    recover_s: float
    note: str = ""
    slow: int = 0  # answered, but over SLOW_S


@dataclass
class Sample:
    start: float
    latency_s: float
    ok: bool


def _pool(pid: str, url: str, price: float, model: str = MODEL) -> dict[str, object]:
    provider, region, _ = pid.split(":")
    return {
        "id": pid, "provider": provider, "region": region, "model": model,
        "upstream_model": UPSTREAM, "gpu_type": "A10G", "gpus_per_replica": 1,
        "endpoints": [url], "supports_n": False,
        "price": {"source": "policy", "usd_per_gpu_hour": price},
        "goodput": {"tokens_per_s": 1200, "prefill_tokens_per_s": 8000,
                    "max_concurrency": 32, "tpot_ms": 22},
        "replicas": {"min": 0, "max": 4, "initial": 1},
    }  # fmt: skip


class Fleet:
    """The engines, the odd upstream and the gateway (processes on free ports)."""

    def __init__(self, tmp: Path, redis_url: str, hedge: bool) -> None:
        self.tmp = tmp
        self.hedge = hedge
        self.redis_url = redis_url
        self.engines: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        self.odd = OddUpstream()
        self.gateway: subprocess.Popen[bytes] | None = None
        self.gw_port = free_port()

    def start_engine(self, name: str) -> None:
        port = self.ports.setdefault(name, free_port())
        args = [sys.executable, "-m", "simengine", "--port", str(port), "--profile", PROFILE,
                "--model", UPSTREAM, "--time-scale", "1.0", "--log-level", "WARNING"]  # fmt: skip
        self.engines[name] = subprocess.Popen(args)
        _wait_port(port)

    def start(self) -> None:
        for name in ("cheap", "mid", "pricey"):
            self.start_engine(name)
        url = "http://127.0.0.1:{}".format
        pools = [
            _pool("gcp:us-central1:cheap", url(self.ports["cheap"]), 0.40),
            _pool("aws:us-east-1:mid", url(self.ports["mid"]), 1.00),
            _pool("azure:eastus:pricey", url(self.ports["pricey"]), 3.00),
            _pool("gcp:us-west1:odd", url(self.odd.port), 0.20, ODD_MODEL),
            _pool("gcp:us-central1:odd-cheap", url(self.ports["cheap"]), 0.40, ODD_MODEL),
            _pool("aws:us-east-1:odd-mid", url(self.ports["mid"]), 1.00, ODD_MODEL),
        ]
        locations = sorted({f"{p['provider']}:{p['region']}" for p in pools})
        policy = {
            "version": 1,
            "slo_classes": {"interactive": {"ttft_ms": 800, "tpot_ms": 60, "hedge": self.hedge}},
            "models": {
                m: {"default_slo": "interactive", "expected_output_tokens": 8}
                for m in (MODEL, ODD_MODEL)
            },
            "pools": pools,
            "client_regions": {"us": {"rtt_ms": {loc: 5.0 for loc in locations}}},
            "routing": {"default_client_region": "us"},
        }
        path = self.tmp / "policy.yaml"
        path.write_text(yaml.safe_dump(policy, sort_keys=False))
        env = {**os.environ, "SKYROUTE_REDIS_URL": self.redis_url,
               "SKYROUTE_REDIS_PREFIX": f"bench-faults:{os.getpid()}",
               "SKYROUTE_POLICY": str(path), "SKYROUTE_PORT": str(self.gw_port),
               "SKYROUTE_API_KEY": API_KEY, "SKYROUTE_ADMIN_TOKEN": ADMIN,
               "SKYROUTE_LOG_LEVEL": "WARNING",
               "SKYROUTE_DATABASE_URL": f"sqlite+aiosqlite:///{self.tmp / 'store.db'}"}  # fmt: skip
        log = (self.tmp / "gateway.log").open("wb")
        self.gateway = subprocess.Popen(
            [sys.executable, "-c", "from skyroute.cli import main; main()", "serve"],
            env=env,
            stdout=log,
            stderr=log,
        )
        _wait_port(self.gw_port)

    def stop(self) -> None:
        for proc in [*self.engines.values(), self.gateway]:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(10)


def _wait_port(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            time.sleep(0.5)  # a listening socket comes up before the app's lifespan is done
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} did not open within {timeout_s:.0f} s")


async def _one(session: aiohttp.ClientSession, url: str, body: dict[str, object]) -> bool:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    try:
        async with session.post(url, json=body, headers=headers) as resp:
            data = await resp.read()
            if resp.status != 200:
                return False
            if body.get("stream"):
                return b"data: [DONE]" in data and b'"error"' not in data
            return b'"choices"' in data
    except (TimeoutError, aiohttp.ClientError):
        return False


async def load(
    url: str, rate: float, seconds: float, body: dict[str, object], t0: float
) -> list[Sample]:
    """Open loop: a request every 1/rate s for ``seconds``; each one's outcome."""
    samples: list[Sample] = []
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def timed(start: float) -> None:
            ok = await _one(session, url, body)
            samples.append(Sample(start - t0, time.monotonic() - start, ok))

        tasks = []
        n = min(int(rate * seconds), MAX_REQUESTS)
        for i in range(n):
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(timed(time.monotonic())))
        await asyncio.gather(*tasks)
    return samples


def summarise(case: str, samples: list[Sample], start: float, end: float, note: str) -> Row:
    window = [s for s in samples if start <= s.start <= end]
    lat = np.array([s.latency_s for s in window]) if window else np.zeros(1)
    bad = [s for s in window if not s.ok or s.latency_s > SLOW_S]
    recover = max((s.start for s in bad), default=start) - start
    return Row(case, len(window), sum(1 for s in window if not s.ok),
               float(np.percentile(lat, 50) * 1000), float(np.percentile(lat, 99) * 1000),
               recover, note, sum(1 for s in window if s.ok and s.latency_s > SLOW_S))  # fmt: skip


Fault = Callable[[Fleet], Awaitable[str]]


async def _case(
    name: str, fleet: Fleet, args: argparse.Namespace, inject: Fault, heal: Fault,
    body: dict[str, object] = CHAT, side: Callable[[float], Coroutine[Any, Any, str]] | None = None,
) -> Row:  # fmt: skip
    url = f"http://127.0.0.1:{fleet.gw_port}/v1/chat/completions"
    total = args.warm_s + args.fault_s + args.after_s
    t0 = time.monotonic()
    run = asyncio.create_task(load(url, args.rate, total, body, t0))
    await asyncio.sleep(args.warm_s)
    note = await inject(fleet)
    side_task = asyncio.create_task(side(t0)) if side is not None else None
    await asyncio.sleep(args.fault_s)
    note = (await heal(fleet)) or note
    if side_task is not None:
        note = await side_task
    samples = await run
    return summarise(name, samples, args.warm_s, args.warm_s + args.fault_s + args.after_s, note)


async def _noop(_: Fleet) -> str:
    return ""


def _signal(name: str, sig: signal.Signals) -> Fault:
    async def act(fleet: Fleet) -> str:
        fleet.engines[name].send_signal(sig)
        return ""

    return act


def _mode(mode: str) -> Fault:
    async def act(fleet: Fleet) -> str:
        fleet.odd.mode = mode
        return ""

    return act


def _restart(name: str) -> Fault:
    async def act(fleet: Fleet) -> str:
        await asyncio.to_thread(fleet.start_engine, name)
        return ""

    return act


async def _long_requests(fleet: Fleet) -> Callable[[float], Coroutine[Any, Any, str]]:
    async def side(_: float) -> str:
        url = f"http://127.0.0.1:{fleet.gw_port}/v1/chat/completions"
        body = {**CHAT, "max_tokens": 1500}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as s:
            oks = await asyncio.gather(*(_one(s, url, body) for _ in range(3)))
        return f"3 requests of 1,500 tokens: {sum(oks)}/3 ok"

    return side


async def _slowloris(fleet: Fleet, count: int, seconds: float) -> str:
    writers = []
    for _ in range(count):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", fleet.gw_port)
        except OSError:
            break
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        writers.append(writer)
    await asyncio.sleep(seconds)
    for writer in writers:
        writer.close()
    return f"{len(writers)} slow connections opened"


async def _disconnects(fleet: Fleet, count: int) -> str:
    url = f"http://127.0.0.1:{fleet.gw_port}/v1/chat/completions"
    body = {**CHAT, "max_tokens": 400}
    headers = {"Authorization": f"Bearer {API_KEY}"}
    timeout = aiohttp.ClientTimeout(total=0.3)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def gone() -> None:
            try:
                async with session.post(url, json=body, headers=headers) as resp:
                    await resp.read()
            except (TimeoutError, aiohttp.ClientError):
                pass

        await asyncio.gather(*(gone() for _ in range(count)))
    return f"{count} clients left after 0.3 s"


async def run(args: argparse.Namespace, fleet: Fleet) -> list[Row]:
    odd = {**CHAT, "model": ODD_MODEL}
    odd_stream = {**odd, "stream": True}
    fault_s = args.fault_s
    cases: dict[str, Callable[[], Awaitable[Row]]] = {
        "baseline": lambda: _case("baseline", fleet, args, _noop, _noop),
        "hung engine (SIGSTOP)": lambda: _case(
            "hung engine (SIGSTOP)", fleet, args,
            _signal("cheap", signal.SIGSTOP), _signal("cheap", signal.SIGCONT)),
        "engine killed, restarted": lambda: _case(
            "engine killed, restarted", fleet, args,
            _signal("cheap", signal.SIGKILL), _restart("cheap")),
        "200 with an HTML body": lambda: _case(
            "200 with an HTML body", fleet, args, _mode("html"), _mode("ok"), odd),
        "200 with a JSON array": lambda: _case(
            "200 with a JSON array", fleet, args, _mode("array"), _mode("ok"), odd),
        "stream without [DONE]": lambda: _case(
            "stream without [DONE]", fleet, args, _mode("truncated"), _mode("ok"), odd_stream),
        "long valid requests": lambda: _long_case(fleet, args),
        "slowloris (2,000 conns)": lambda: _case(
            "slowloris (2,000 conns)", fleet, args, _noop, _noop,
            side=lambda _: _slowloris(fleet, 2000, fault_s)),
        "client disconnects": lambda: _case(
            "client disconnects", fleet, args, _noop, _noop,
            side=lambda _: _disconnects(fleet, 50)),
    }  # fmt: skip
    rows = []
    for name, make in cases.items():
        if args.only and not any(o in name for o in args.only):
            continue
        row = await make()
        rows.append(row)
        print(f"  {row.case}: {row.requests} requests, {row.failures} failed", flush=True)
        await asyncio.sleep(args.settle_s)  # ejections and backoffs expire between cases
    return rows


async def _long_case(fleet: Fleet, args: argparse.Namespace) -> Row:
    side = await _long_requests(fleet)
    return await _case("long valid requests", fleet, args, _noop, _noop, side=side)


def gateway_cpu_s(fleet: Fleet) -> float:
    assert fleet.gateway is not None
    with open(f"/proc/{fleet.gateway.pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    stop_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second")
    parser.add_argument("--warm-s", type=float, default=3.0)
    parser.add_argument("--fault-s", type=float, default=8.0)
    parser.add_argument("--after-s", type=float, default=4.0)
    parser.add_argument("--settle-s", type=float, default=6.0)
    parser.add_argument("--only", nargs="*", default=[], help="substrings of case names")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--hedge",
        action="store_true",
        help="the interactive SLO class hedges (slo_classes.*.hedge)",
    )
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        redis_url_or_embedded(os.environ.get("SKYROUTE_REDIS_URL")) as redis_url,
    ):
        fleet = Fleet(Path(tmp), redis_url, args.hedge)
        try:
            fleet.start()

            async def go() -> list[Row]:
                runner = await fleet.odd.start()
                try:
                    return await run(args, fleet)
                finally:
                    await runner.cleanup()

            cpu0 = gateway_cpu_s(fleet)
            rows = asyncio.run(go())
            cpu = gateway_cpu_s(fleet) - cpu0
        finally:
            fleet.stop()
    sent = sum(r.requests for r in rows)
    print(f"\nfault benchmark: {args.rate:g} req/s open loop, fault {args.fault_s:g} s, "
          f"hedging {'on' if args.hedge else 'off'}, "
          f"window = fault + {args.after_s:g} s; slow = over {SLOW_S * 1000:.0f} ms")  # fmt: skip
    print(f"{'case':<26} {'requests':>8} {'failed':>6} {'slow':>6} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'recover s':>9}  note")  # fmt: skip
    for r in rows:
        print(f"{r.case:<26} {r.requests:>8} {r.failures:>6} {r.slow:>6} {r.p50_ms:>8.0f} "
              f"{r.p99_ms:>8.0f} {r.recover_s:>9.1f}  {r.note}")  # fmt: skip
    print(f"gateway CPU over the run: {cpu:.1f} s (all requests of all phases, ~{sent} in windows)")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))


if __name__ == "__main__":
    main()
