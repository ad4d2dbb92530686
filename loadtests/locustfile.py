"""Locust load test of a skyroute gateway (or any OpenAI-compatible endpoint).

    .venv/bin/locust -f loadtests/locustfile.py --headless -u 20 -r 5 -t 30s \\
        [--host http://127.0.0.1:8080] [--stream-ratio 0.5] [--slo-mix interactive=2,batch=1] \\
        [--slo-threshold 0.9] [--trace-replay --replay-speedup 20]

With ``skyroute demo`` running nothing else is needed: the API key and the gateway's URL
come from the demo's CLI context (``skyroute.context``) unless ``SKYROUTE_API_KEY`` /
``--api-keys`` and ``--host`` are given.

Each user sends ``POST /v1/chat/completions`` whose prompt and output lengths are drawn
from the Azure LLM inference trace (``loadtests/trace_dist.py``), streamed or not, with an
``x-skyroute-slo`` class and a tenant key, all per the options below. Locust's table shows
each request under ``chat <class> <stream|nonstream>`` (total time) and, for streams, a
separate ``TTFT chat <class>`` entry (time to the first content chunk). ``--trace-replay``
swaps the closed loop for the trace's own arrival times, sped up ``--replay-speedup`` times.

At the end it prints SLO attainment per class and the share of traffic per provider and
region (from the ``x-skyroute-*`` headers), and exits 1 if a class's attainment is below
``--slo-threshold``. Distributed runs (``--processes``) merge the workers' tallies; trace
replay runs in one process only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
from locust import HttpUser, LoadTestShape, events, task
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

try:  # run from the repository root: locust puts the working directory on sys.path
    from loadtests import slo_report, trace_dist
except ModuleNotFoundError:  # run from elsewhere: locust also puts this file's directory there
    import slo_report  # type: ignore[no-redef]
    import trace_dist  # type: ignore[no-redef]
from skyroute import context

CHAT_PATH = "/v1/chat/completions"
DEFAULT_TARGETS = "interactive=800/60,standard=2000/100,batch=30000/500"  # the demo policy's


@events.init_command_line_parser.add_listener
def add_options(parser: Any) -> None:
    g = parser
    g.add_argument("--model", default="llama-3.1-8b", help="model name(s), comma-separated")
    g.add_argument("--stream-ratio", type=float, default=0.5, help="share of streamed requests")
    g.add_argument(
        "--slo-mix",
        default="interactive=0.5,standard=0.3,batch=0.2",
        help="x-skyroute-slo classes with weights; 'none' sends no header",
    )
    g.add_argument(
        "--slo-targets", default=DEFAULT_TARGETS, help="per class TTFT_MS/TPOT_MS, for attainment"
    )
    g.add_argument(
        "--slo-threshold",
        type=float,
        default=0.9,
        help="exit 1 if any class's SLO attainment is below this (0..1; default 0.9)",
    )
    g.add_argument(
        "--api-keys",
        default="",
        env_var="SKYROUTE_API_KEYS",
        is_secret=True,
        help="comma-separated tenant keys (default: SKYROUTE_API_KEY)",
    )
    g.add_argument("--tenant-weights", default="", help="weights of the tenants, e.g. 3,1")
    g.add_argument("--client-region", default="", help="x-skyroute-client-region to send")
    g.add_argument("--trace", default="", help="trace CSV (default: ../shared trace or sample)")
    g.add_argument("--max-prompt-tokens", type=int, default=0, help="cap prompt lengths (0: none)")
    g.add_argument("--max-output-tokens", type=int, default=0, help="cap output lengths (0: none)")
    g.add_argument("--seed", type=int, default=0, help="seed of the request mix")
    g.add_argument("--request-timeout", type=float, default=120.0, help="per request, seconds")
    g.add_argument(
        "--trace-replay",
        action="store_true",
        help="follow the trace's arrival times instead of -u/-r",
    )
    g.add_argument("--replay-speedup", type=float, default=1.0, help="trace time / wall time")
    g.add_argument("--replay-start-s", type=float, default=0.0, help="offset into the trace, s")
    g.add_argument("--replay-max-users", type=int, default=2000, help="cap on replay users")
    g.add_argument(
        "--replay-latency-s",
        type=float,
        default=5.0,
        help="latency assumed for sizing users until measured",
    )


@dataclass
class RunState:
    """Everything the users, the shape and the summary share during one run."""

    trace: trace_dist.Trace
    targets: dict[str, slo_report.SloTarget]
    slo_names: list[str | None]
    slo_weights: list[float]
    models: list[str]
    keys: list[str]
    key_weights: list[float]
    tally: slo_report.Tally = field(default_factory=slo_report.Tally)
    replay: trace_dist.ReplaySchedule | None = None
    replay_t0: float = 0.0
    user_ids: itertools.count[int] = field(default_factory=itertools.count)
    reported: bool = False


def options_of(environment: Environment) -> argparse.Namespace:
    opts: argparse.Namespace | None = environment.parsed_options
    assert opts is not None, "run through the locust command line"
    return opts


def state_of(environment: Environment) -> RunState:
    state: RunState = environment.skyroute  # type: ignore[attr-defined]
    return state


@events.init.add_listener
def on_init(environment: Environment, **_: Any) -> None:
    opts = environment.parsed_options
    if opts is None:  # used as a library without a command line
        return
    # Without keys or --host, the running demo's (its CLI context) are used.
    keys = [k.strip() for k in (opts.api_keys or context.api_key() or "").split(",")]
    keys = [k for k in keys if k]
    if not keys:
        raise SystemExit(
            "no API key: start `skyroute demo`, or set SKYROUTE_API_KEY (or --api-keys)"
        )
    if not environment.host:
        environment.host = context.gateway_url()
    key_weights = [float(w) for w in opts.tenant_weights.split(",")] if opts.tenant_weights else []
    if key_weights and len(key_weights) != len(keys):
        raise SystemExit(f"--tenant-weights has {len(key_weights)} weights for {len(keys)} keys")
    mix = slo_report.parse_weights(opts.slo_mix)
    trace = trace_dist.load_trace(Path(opts.trace) if opts.trace else None)
    state = RunState(
        trace=trace,
        targets=slo_report.parse_targets(opts.slo_targets),
        slo_names=[None if n == "none" else n for n in mix],
        slo_weights=list(mix.values()),
        models=[m.strip() for m in opts.model.split(",") if m.strip()],
        keys=keys,
        key_weights=key_weights or [1.0] * len(keys),
    )
    if opts.trace_replay:
        if isinstance(environment.runner, MasterRunner | WorkerRunner):
            raise SystemExit("--trace-replay runs in one process: drop --processes/--master")
        state.replay = trace_dist.ReplaySchedule(
            trace.window(opts.replay_start_s, None), opts.replay_speedup
        )
    environment.skyroute = state  # type: ignore[attr-defined]
    print(
        f"skyroute locust: trace {trace.source} ({len(trace.requests)} requests), "
        f"{len(keys)} tenant key(s), SLO mix {mix}, stream ratio {opts.stream_ratio:g}"
        + (f", replay x{opts.replay_speedup:g}" if state.replay else ""),
        flush=True,
    )


@events.test_start.add_listener
def on_test_start(environment: Environment, **_: Any) -> None:
    if hasattr(environment, "skyroute"):
        state_of(environment).replay_t0 = time.monotonic()


# report_to_master and worker_report are fired without the environment: each process keeps
# its own here (one environment per locust process).
_ENV: dict[str, Environment] = {}


@events.init.add_listener
def remember_env(environment: Environment, **_: Any) -> None:
    _ENV["env"] = environment


@events.report_to_master.add_listener
def on_report_to_master(client_id: str, data: dict[str, Any], **_: Any) -> None:
    """Workers ship what they tallied since their last report, then start afresh."""
    env = _ENV.get("env")
    if env is None or not hasattr(env, "skyroute"):
        return
    state = state_of(env)
    data["skyroute"] = state.tally.to_dict()
    state.tally = slo_report.Tally()


@events.worker_report.add_listener
def on_worker_report(client_id: str, data: dict[str, Any], **_: Any) -> None:
    env = _ENV.get("env")
    if "skyroute" in data and env is not None and hasattr(env, "skyroute"):
        state_of(env).tally.merge(data["skyroute"])


@events.test_stop.add_listener
def on_test_stop(environment: Environment, **_: Any) -> None:
    """Print the summary and fail the run if an SLO class is under the threshold."""
    if isinstance(environment.runner, WorkerRunner) or not hasattr(environment, "skyroute"):
        return
    state = state_of(environment)
    if state.reported:
        return
    state.reported = True
    opts = options_of(environment)
    lines = slo_report.render(state.tally, state.targets, opts.slo_threshold)
    if state.replay is not None:
        r = state.replay
        lines.insert(
            -1,
            f"Trace replay x{r.speedup:g}: {r.sent} of {len(r.requests)} requests "
            f"sent, {r.late} more than 1 s late, max lag {r.max_lag_s:.2f} s",
        )
    print("\n".join(lines), flush=True)
    if state.tally.requests == 0 or state.tally.below(opts.slo_threshold):
        environment.process_exit_code = 1


class TraceShape(LoadTestShape):
    """Without ``--trace-replay``: -u/-r/-t as usual. With it: enough users that each
    request leaves at its (sped-up) trace time, found by Little's law from the arrival rate
    ahead and the latency measured so far; the run ends when the trace has been sent."""

    use_common_options = True

    def __init__(self) -> None:
        super().__init__()
        self.users = 0

    def tick(self) -> tuple[int, float] | None:
        assert self.runner is not None
        env = self.runner.environment
        opts = options_of(env)
        t = self.get_run_time()
        if opts.run_time and t >= opts.run_time:
            return None
        replay = state_of(env).replay if hasattr(env, "skyroute") else None
        if replay is None:
            return int(opts.num_users or 1), float(opts.spawn_rate or 1)
        if replay.done:
            return None
        measured = self.runner.stats.total.median_response_time / 1000.0
        latency = measured if self.runner.stats.total.num_requests >= 20 else opts.replay_latency_s
        rate = max(replay.arrival_rate(t, 10.0), replay.arrival_rate(t + 10.0, 10.0))
        needed = math.ceil(rate * latency * 1.5) + 2
        # Never scale down: a stopped user would drop the request it has claimed.
        self.users = min(max(self.users, needed), opts.replay_max_users)
        return self.users, float(max(self.users, 1))


class ChatUser(HttpUser):
    """Sends OpenAI chat completions with trace-drawn lengths, classes and tenants."""

    def on_start(self) -> None:
        self.state = state_of(self.environment)
        opts = options_of(self.environment)
        self.opts = opts
        self.rng = random.Random(opts.seed * 1_000_003 + next(self.state.user_ids))

    def wait_time(self) -> float:
        return 0.0

    @task
    def chat(self) -> None:
        replay = self.state.replay
        if replay is None:
            self.send(self.state.trace.draw(self.rng))
            return
        claimed = replay.claim()
        if claimed is None:
            gevent.sleep(1.0)  # the shape ends the run once in-flight requests finish
            return
        due, request = claimed
        delay = self.state.replay_t0 + due - time.monotonic()
        if delay > 0:
            gevent.sleep(delay)
        replay.sent_at(max(0.0, -delay))
        try:
            self.send(request)
        finally:
            replay.finished()

    def send(self, request: trace_dist.TraceRequest) -> None:
        opts, rng, state = self.opts, self.rng, self.state
        prompt = request.prompt_tokens
        if opts.max_prompt_tokens:
            prompt = min(prompt, opts.max_prompt_tokens)
        output = request.output_tokens
        if opts.max_output_tokens:
            output = min(output, opts.max_output_tokens)
        slo = rng.choices(state.slo_names, weights=state.slo_weights, k=1)[0]
        tenant = rng.choices(range(len(state.keys)), weights=state.key_weights, k=1)[0]
        stream = rng.random() < opts.stream_ratio
        headers = {"authorization": f"Bearer {state.keys[tenant]}"}
        if slo is not None:
            headers["x-skyroute-slo"] = slo
        if opts.client_region:
            headers["x-skyroute-client-region"] = opts.client_region
        body: dict[str, Any] = {
            "model": rng.choice(state.models),
            "messages": [{"role": "user", "content": trace_dist.prompt_text(prompt)}],
            "max_tokens": output,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        cls = slo or "default"
        name = f"chat {cls} {'stream' if stream else 'nonstream'}"
        started = time.perf_counter()
        outcome = (self._stream if stream else self._plain)(body, headers, name, started)
        target = state.targets.get(cls)
        ok = outcome.ok
        outcome = slo_report.Outcome(
            cls,
            f"tenant-{tenant}",
            stream,
            ok,
            outcome.e2e_s,
            outcome.output_tokens,
            outcome.ttft_s,
            outcome.last_token_s,
            outcome.provider,
            outcome.region,
        )
        if target is not None:
            state.tally.add(outcome, target)

    def _plain(
        self, body: dict[str, Any], headers: dict[str, str], name: str, started: float
    ) -> slo_report.Outcome:
        with self.client.post(
            CHAT_PATH,
            json=body,
            headers=headers,
            name=name,
            catch_response=True,
            timeout=self.opts.request_timeout,
        ) as resp:
            e2e = time.perf_counter() - started
            tokens, ok = 0, resp.status_code == 200
            if ok:
                try:
                    tokens = int(resp.json()["usage"]["completion_tokens"])
                except (ValueError, KeyError, TypeError) as exc:
                    ok = False
                    resp.failure(f"bad completion body: {exc!r}")
            else:
                resp.failure(f"HTTP {resp.status_code}: {resp.text[:200]}")
            return slo_report.Outcome(
                "",
                "",
                False,
                ok,
                e2e,
                tokens,
                None,
                None,
                resp.headers.get("x-skyroute-provider", "-"),
                resp.headers.get("x-skyroute-region", "-"),
            )

    def _stream(
        self, body: dict[str, Any], headers: dict[str, str], name: str, started: float
    ) -> slo_report.Outcome:
        ttft: float | None = None
        last: float | None = None
        chunks = usage_tokens = size = 0
        problem = ""
        with self.client.post(
            CHAT_PATH,
            json=body,
            headers=headers,
            name=name,
            stream=True,
            catch_response=True,
            timeout=self.opts.request_timeout,
        ) as resp:
            provider = resp.headers.get("x-skyroute-provider", "-")
            region = resp.headers.get("x-skyroute-region", "-")
            if resp.status_code != 200:
                problem = f"HTTP {resp.status_code}: {resp.text[:200]}"
            else:
                buffer = b""
                done = False
                try:
                    for data in resp.iter_content(chunk_size=None):
                        now = time.perf_counter()
                        size += len(data)
                        buffer += data
                        *lines, buffer = buffer.split(b"\n")
                        for line in lines:
                            if not line.startswith(b"data:"):
                                continue
                            payload = line[5:].strip()
                            if payload == b"[DONE]":
                                done = True
                                continue
                            event = json.loads(payload)
                            if "error" in event:
                                problem = f"stream error: {str(event['error'])[:200]}"
                                continue
                            if event.get("usage"):
                                usage_tokens = int(event["usage"].get("completion_tokens", 0))
                            for choice in event.get("choices") or []:
                                if (choice.get("delta") or {}).get("content"):
                                    chunks += 1
                                    ttft = now - started if ttft is None else ttft
                                    last = now - started
                except Exception as exc:  # a broken stream: requests/urllib3/JSON errors
                    problem = f"stream broke: {exc!r}"
                if not problem and not done:
                    problem = "stream ended without data: [DONE]"
            e2e = time.perf_counter() - started
            resp.request_meta["response_time"] = e2e * 1000.0  # whole stream, not headers
            resp.request_meta["response_length"] = size
            if problem:
                resp.failure(problem)
        if ttft is not None and not problem:
            self.environment.events.request.fire(
                request_type="TTFT",
                name=name.rsplit(" ", 1)[0],
                response_time=ttft * 1000.0,
                response_length=0,
                exception=None,
                context={},
            )
        return slo_report.Outcome(
            "", "", True, not problem, e2e, usage_tokens or chunks, ttft, last, provider, region
        )
