"""``skyroute demo``: the whole loop on one machine.

Embedded Redis; a simulated multi-cloud fleet (one OpenAI-compatible vLLM stand-in per
endpoint, with the latency profile of its GPU/model pair); the price feed reading a
static price file; the autoscaler, whose ``local`` provider starts and stops the engine
processes of the pools with a ``scaling`` section (the gateway discovers them from the
node group); and the gateway in front. ``--load`` also drives one bounded burst
(``skyroute load``) once the gateway is up. See :mod:`skyroute.demo_run` for what the
run's copy of the packaged policy changes, and :mod:`skyroute.demo_sidecars`.

The engines take free ports: the policy is copied into a run directory with its
127.0.0.1 endpoints moved to them (comments kept), so two demos, or a demo and the
tests, share a machine. That copy is the policy the gateway watches; the CLI context
(:mod:`skyroute.context`) points every subcommand at it, at the gateway and at Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from pydantic import SecretStr

from base.ports import reserve_port
from gateway.settings import GatewaySettings
from live.policy_file import load_policy
from live.redis_client import connect
from live.tables import LiveTables
from router.policy import Policy, PoolSpec
from simengine.perf_model import profile_name
from skyroute.context import Context, context_path, write_context
from skyroute.demo_run import PRICE_FILE, demo_price_rows, run_policy_text
from skyroute.demo_sidecars import DEMAND_BUCKET_S, FAST_AUTOSCALE, sidecars
from skyroute.serve import redis_for, run_gateway

_LOCAL_URL = re.compile(r"http://(?:127\.0\.0\.1|localhost):(\d+)")


def demo_policy_path() -> Path:
    """The packaged demo policy (``skyroute/fleet/demo-policy.yaml``)."""
    return Path(str(resources.files("skyroute.fleet") / "demo-policy.yaml"))


def engine_profile(pool: PoolSpec) -> str:
    """The simulated-engine profile of a pool: GPU family + model, e.g. ``a100-llama-3.1-70b``.

    Raises KeyError if there is no such profile.
    """
    return profile_name(pool.gpu_type, pool.model)


def _die_with_parent() -> None:
    # Linux: if the demo is killed outright, its engines must not linger on the ports.
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def with_free_ports(text: str) -> tuple[str, dict[int, socket.socket]]:
    """The policy text with every ``http://127.0.0.1:PORT`` endpoint moved to a free
    port (one new port per old one; everything else, comments included, unchanged), and
    by new port a socket bound to it (``base.ports.reserve_port``) that holds the port for
    the engine ``fleet`` starts there. The caller closes the sockets."""
    held: dict[int, socket.socket] = {}
    moved: dict[str, int] = {}

    def repl(match: re.Match[str]) -> str:
        old = match.group(1)
        if old not in moved:
            sock = reserve_port()
            moved[old] = port = int(sock.getsockname()[1])
            held[port] = sock
        return f"http://127.0.0.1:{moved[old]}"

    try:
        return _LOCAL_URL.sub(repl, text), held
    except BaseException:
        _close(held)
        raise


def _close(held: dict[int, socket.socket]) -> None:
    for sock in held.values():
        sock.close()
    held.clear()


def _wait_healthy(url: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        probe = f"{url}/health"
        with contextlib.suppress(OSError), urllib.request.urlopen(probe, timeout=0.5) as resp:
            if resp.status == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"simulated engine at {url} did not become healthy")


@contextlib.contextmanager
def fleet(
    policy: Policy,
    time_scale: float = 1.0,
    seed: int = 0,
    held: dict[int, socket.socket] | None = None,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start one simulated engine per pool endpoint (127.0.0.1 only); stop them on exit.
    Pools with a ``scaling`` section are left out: the autoscaler starts theirs. An
    endpoint whose port is in ``held`` (``with_free_ports``) gets that bound socket, and
    the parent's copy is closed once the engine has it; any other binds its port itself."""
    held = {} if held is None else held
    procs: list[subprocess.Popen[bytes]] = []
    fixed = [p for p in policy.pools if p.scaling is None]
    try:
        for n, pool in enumerate(fixed):
            for endpoint in pool.endpoints:
                if endpoint.host not in {"127.0.0.1", "localhost"}:
                    raise ValueError(f"demo engines run on 127.0.0.1 only, not {endpoint}")
                sock = held.pop(endpoint.port or 0, None)
                fds: tuple[int, ...]
                if sock is None:
                    listen, fds = ["--port", str(endpoint.port)], ()
                else:
                    listen, fds = ["--fd", str(sock.fileno())], (sock.fileno(),)
                args = [
                    sys.executable, "-m", "simengine", *listen,
                    "--profile", engine_profile(pool),
                    "--model", pool.upstream_model,
                    "--seed", str(seed + n),
                    "--time-scale", str(time_scale),
                    "--log-level", "WARNING",
                ]  # fmt: skip
                # Engines start before the demo runs any thread, so preexec_fn is safe here.
                try:
                    procs.append(
                        subprocess.Popen(args, preexec_fn=_die_with_parent, pass_fds=fds)  # noqa: PLW1509
                    )
                finally:
                    if sock is not None:
                        sock.close()
        deadline = time.monotonic() + 30
        for pool in fixed:
            for endpoint in pool.endpoints:
                _wait_healthy(str(endpoint).rstrip("/"), deadline)
        dead = [p.args for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"simulated engines exited at start: {dead}")
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


async def publish_fleet(policy: Policy, redis_url: str, prefix: str) -> None:
    """Write each fixed pool's ready replicas (one per running endpoint) to the live
    tables; the autoscaler publishes those of the pools it manages."""
    redis = connect(redis_url)
    try:
        tables = LiveTables(redis, prefix=prefix)
        for pool in policy.pools:
            if pool.scaling is not None:
                continue
            await tables.set_replicas(
                pool.id, ready=len(pool.endpoints), target=len(pool.endpoints)
            )
    finally:
        await redis.aclose()


def _run_files(source: Path, run_dir: Path, held: dict[int, socket.socket]) -> Path:
    """Write the run's policy (and, for the packaged demo policy, its static price file)
    into ``run_dir``; the policy's path. The endpoints' new ports are added to ``held``
    (``with_free_ports``). See :mod:`skyroute.demo_run`."""
    text, reserved = with_free_ports(source.read_text(encoding="utf-8"))
    held.update(reserved)
    if source.resolve() == demo_policy_path().resolve():
        text, wanted = run_policy_text(text)
        prices_csv = (source.parent / "demo_prices.csv").read_text(encoding="utf-8")
        doc = {"prices": demo_price_rows(wanted, prices_csv)}
        (run_dir / PRICE_FILE).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    policy_file = run_dir / "policy.yaml"
    policy_file.write_text(text, encoding="utf-8")
    return policy_file


def _start_load(args: list[str]) -> subprocess.Popen[bytes]:
    """``skyroute load ARGS`` in the background: it waits for the gateway itself."""
    command = [sys.executable, "-c", "from skyroute.cli import main; main()", "load", *args]
    # Started before the gateway runs any thread, so preexec_fn is safe here.
    return subprocess.Popen(command, preexec_fn=_die_with_parent)  # noqa: PLW1509


def run_demo(
    settings: GatewaySettings, time_scale: float = 1.0, load: list[str] | None = None
) -> None:
    """Run the whole demo in the foreground until Ctrl-C. ``load``: arguments of a
    ``skyroute load`` to run against it once it is up (None: none)."""
    api_key = (
        settings.api_key.get_secret_value()
        if settings.api_key
        else f"sk-sr-{secrets.token_urlsafe(24)}"
    )
    admin = (
        settings.admin_token.get_secret_value()
        if settings.admin_token
        else f"sk-adm-{secrets.token_urlsafe(24)}"
    )
    run_dir = Path(tempfile.mkdtemp(prefix="skyroute-demo-"))
    held: dict[int, socket.socket] = {}
    loader: subprocess.Popen[bytes] | None = None
    try:
        policy_file = _run_files(Path(settings.policy), run_dir, held)
        update: dict[str, object] = {
            "api_key": SecretStr(api_key), "admin_token": SecretStr(admin),
            "policy": policy_file,
        }  # fmt: skip
        if "demand_bucket_s" not in settings.model_fields_set:
            update["demand_bucket_s"] = DEMAND_BUCKET_S
        settings = settings.model_copy(update=update)
        policy = load_policy(policy_file)
        with redis_for(settings) as live, fleet(policy, time_scale=time_scale, held=held):
            _close(held)  # the endpoints of autoscaled pools: their engines bind their own
            assert live.redis_url is not None
            shared = {
                "SKYROUTE_REDIS_URL": live.redis_url,
                "SKYROUTE_REDIS_PREFIX": live.redis_prefix,
                "SKYROUTE_POLICY": str(policy_file),
                "SKYROUTE_REPLICA_TTL_MS": str(live.replica_ttl_ms),
                "SKYROUTE_AUTOSCALE_DEMAND_BUCKET_S": str(live.demand_bucket_s),
            }
            print("skyroute demo: starting the price feed and the autoscaler…", flush=True)
            with sidecars(policy, shared, run_dir, time_scale, _die_with_parent):
                asyncio.run(publish_fleet(policy, live.redis_url, live.redis_prefix))
                base = f"http://{live.host}:{live.port}"
                context = Context(
                    url=base, admin_token_file=str(run_dir / "admin-token"),
                    api_key_file=str(run_dir / "api-key"),
                    redis_url=live.redis_url, redis_prefix=live.redis_prefix,
                    policy=str(policy_file),
                    cloud_adapter_for=json.loads(FAST_AUTOSCALE["SKYROUTE_CLOUD_ADAPTER_FOR"]),
                )  # fmt: skip
                ctx_file = write_context(context, admin, api_key=api_key)
                _banner(policy, live, base, api_key, admin, ctx_file, run_dir)
                if load is not None:
                    loader = _start_load(load)
                run_gateway(live)
    finally:
        _close(held)
        if loader is not None and loader.poll() is None:
            loader.terminate()
            loader.wait(timeout=10)
        _forget_context(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)


def _forget_context(run_dir: Path) -> None:
    """Remove the CLI context if it still points at this demo (not at a newer one)."""
    path = context_path()
    with contextlib.suppress(OSError):
        if str(run_dir) in path.read_text(encoding="utf-8"):
            path.unlink()


def _banner(
    policy: Policy,
    live: GatewaySettings,
    base: str,
    api_key: str,
    admin: str,
    ctx_file: Path,
    run_dir: Path,
) -> None:
    pools = ", ".join(f"{p.id}" for p in policy.pools)
    scaled = [p.id for p in policy.pools if p.scaling is not None]
    model = next(iter(policy.models))
    autoscaled = (
        f"  autoscaled {', '.join(scaled)}\n"
        f"             (replicas are local engines; log: {run_dir / 'autoscaler.log'})\n"
        if scaled
        else ""
    )
    prices = next(run_dir.glob("*prices.json"), None)
    price_line = (
        f"  prices     {prices}   (skyroute prices set POOL USD_PER_GPU_HOUR)\n" if prices else ""
    )
    # The keys are printed on purpose: this is the demo's only way to hand them over.
    print(
        f"\nskyroute demo: {len(policy.pools)} simulated pools ({pools})\n"
        f"  redis      {live.redis_url}\n"
        f"  gateway    {base}/v1   (OpenAI-compatible)\n"
        f"  dashboard  {base}/dashboard   (any user name, the admin key as password)\n"
        f"  API key    {api_key}\n"
        f"  admin key  {admin}\n"
        f"  policy     {live.policy}   (edit it: the gateway reloads it)\n"
        f"{price_line}{autoscaled}"
        f"  context    {ctx_file}   (skyroute pools, explain, keys, ... use it)\n\n"
        "Try:\n"
        f"  curl -s {base}/v1/chat/completions -H 'Authorization: Bearer {api_key}' "
        "-H 'Content-Type: application/json' -D - \\\n"
        f'    -d \'{{"model": "{model}", "max_tokens": 32, '
        '"messages": [{"role": "user", "content": "Hello from skyroute"}]}\'\n'
        "  skyroute pools\n"
        "  skyroute load          (a burst of EU traffic: watch the autoscaler add replicas)\n\n"
        "Or in another shell, with variables instead of the context:\n"
        f"  export SKYROUTE_ADMIN_URL={base} SKYROUTE_ADMIN_TOKEN={admin} \\\n"
        f"         SKYROUTE_REDIS_URL={live.redis_url} \\\n"
        f"         SKYROUTE_REDIS_PREFIX={live.redis_prefix} \\\n"
        f"         SKYROUTE_POLICY={live.policy} SKYROUTE_API_KEY={api_key}\n",
        flush=True,
    )
