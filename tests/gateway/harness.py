"""Real processes for gateway integration tests: simulated engines and gateway
replicas, all on 127.0.0.1, each stopped when its test ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from skyroute.embedded_redis import free_port

API_KEY = "sk-test-client-0123456789abcdef"
# How many ports ``Gateway.start`` tries when the one it picked is taken before it binds.
BIND_TRIES = 3
ADMIN_TOKEN = "sk-test-admin-0123456789abcdef"


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    """Poll ``condition`` until it holds; raise TimeoutError naming ``what`` after
    ``timeout_s``. A wait on a condition, bounded, never a timing assertion."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def wait_until(
    url: str,
    timeout_s: float = 20.0,
    ok: tuple[int, ...] = (200,),
    gone: Callable[[], bool] | None = None,
) -> None:
    """Poll ``url`` until it answers one of ``ok``, or until ``gone()`` says the server
    will never answer (its process exited); raise TimeoutError after ``timeout_s``."""

    def answers() -> bool:
        if gone is not None and gone():
            return True
        try:
            return httpx.get(url, timeout=0.5).status_code in ok
        except httpx.HTTPError:
            return False

    wait_for(answers, f"{url} to come up", timeout_s)


@dataclass
class Engine:
    """One simulated engine process."""

    profile: str
    model: str
    time_scale: float
    seed: int = 0
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Engine:
        """Start the process and wait until it listens and ``/health`` answers. A port
        another process took between ``free_port()`` and the bind is retried on a new one
        (a few times): the health check alone would have been answered by whoever holds
        the port (CI once met another test's engine there)."""
        for _ in range(BIND_TRIES):
            args = [
                sys.executable, "-m", "simengine", "--port", str(self.port),
                "--profile", self.profile, "--model", self.model, "--seed", str(self.seed),
                "--time-scale", str(self.time_scale), "--log-level", "WARNING",
            ]  # fmt: skip
            self.proc = subprocess.Popen(args)
            wait_for(lambda: self._exited() or self._listening(), f"engine on {self.port}")
            if not self._exited():
                wait_until(f"{self.url}/health")
                return self
            self.port = free_port()
        raise RuntimeError(f"engine exited before listening {BIND_TRIES} times")

    def _exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def _listening(self) -> bool:
        assert self.proc is not None
        try:
            conns = psutil.Process(self.proc.pid).net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            return False
        return any(c.status == psutil.CONN_LISTEN and c.laddr.port == self.port for c in conns)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def set_faults(self, **faults: Any) -> None:
        httpx.post(f"{self.url}/sim/faults", json=faults, timeout=2).raise_for_status()

    def requests_received(self) -> int:
        """Inference requests this engine received (its ``sim:requests_received_total``)."""
        text = httpx.get(f"{self.url}/metrics", timeout=5).text
        return int(
            sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("sim:requests_received_total")
            )
        )


def running(engines: Iterable[Engine]) -> float:
    """Requests the engines are generating now (their ``vllm:num_requests_running``)."""
    total = 0.0
    for engine in engines:
        for line in httpx.get(f"{engine.url}/metrics", timeout=5).text.splitlines():
            if line.startswith("vllm:num_requests_running"):
                total += float(line.rsplit(" ", 1)[1])
    return total


@dataclass
class Gateway:
    """One gateway replica process (``skyroute serve``)."""

    policy: Path
    redis_url: str
    prefix: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def store_path(self) -> Path:
        """The embedded store (SQLite file) of this replica's prefix."""
        return self.policy.parent / f"store-{self.prefix.replace(':', '-')}.db"

    def start(self) -> Gateway:
        """Start the process and wait until ``/readyz`` answers. A port another process
        took between ``free_port()`` and the bind is retried on a new one (a few times);
        a process that exits before it is ready for another reason raises at once."""
        for _ in range(BIND_TRIES):
            self._launch()
            try:
                # Generous: on a loaded 2-core machine a start-up can take tens of seconds.
                wait_until(f"{self.base}/readyz", timeout_s=60.0, gone=self._exited)
            except TimeoutError:
                self.stop()  # never leak a process that did not come up
                raise
            assert self.proc is not None and self.log is not None
            if self.proc.poll() is None:
                return self
            if b"address already in use" not in self.log.read_bytes():
                raise RuntimeError(
                    f"gateway exited with {self.proc.returncode} before it was ready; "
                    f"see {self.log}"
                )
            self.port = free_port()
        raise RuntimeError(f"gateway found its port taken {BIND_TRIES} times")

    def _exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def _launch(self) -> None:
        env = {
            **os.environ,
            "SKYROUTE_REDIS_URL": self.redis_url,
            "SKYROUTE_REDIS_PREFIX": self.prefix,
            "SKYROUTE_POLICY": str(self.policy),
            "SKYROUTE_PORT": str(self.port),
            "SKYROUTE_API_KEY": API_KEY,
            "SKYROUTE_ADMIN_TOKEN": ADMIN_TOKEN,
            "SKYROUTE_POLICY_POLL_S": "0.2",
            # No endpoint controller to wait for here: a test that means to see the
            # SIGTERM drain delay sets it (extra_env).
            "SKYROUTE_DRAIN_DELAY_S": "0",
            # One store per Redis prefix, as one store per deployment: replicas of a test
            # share it, tests do not.
            "SKYROUTE_DATABASE_URL": f"sqlite+aiosqlite:///{self.store_path}",
            **self.extra_env,
        }
        self.log = self.policy.parent / f"gateway-{self.port}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from skyroute.cli import main; main()", "serve"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def admin(self, method: str, path: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        return httpx.request(method, f"{self.base}{path}", headers=headers, timeout=10)

    def admin_json(self, method: str, path: str, body: Any = None) -> Any:
        """An admin call that must succeed; its JSON answer."""
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        resp = httpx.request(method, f"{self.base}{path}", headers=headers, json=body, timeout=10)
        assert resp.is_success, (method, path, resp.status_code, resp.text)
        return resp.json()

    def logs(self) -> str:
        return self.log.read_text() if self.log and self.log.exists() else ""

    def chat_status(self, text: str, model: str = "chat-model") -> int:
        """The HTTP status of one short chat request."""
        resp = httpx.post(
            f"{self.base}/v1/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": text}],
                  "max_tokens": 4},
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=30,
        )  # fmt: skip
        return resp.status_code

    def replicas(self, pool_id: str) -> list[dict[str, Any]]:
        """The replicas of one pool as ``GET /admin/pools/{id}`` shows them."""
        resp = self.admin("GET", f"/admin/pools/{pool_id}")
        resp.raise_for_status()
        replicas: list[dict[str, Any]] = resp.json()["replicas"]
        return replicas


def pool(
    pool_id: str,
    engine: Engine,
    *,
    provider: str,
    region: str,
    model: str,
    usd_per_gpu_hour: float,
    gpus: int = 1,
    tokens_per_s: float = 1000.0,
    prefill_tokens_per_s: float = 10000.0,
    max_concurrency: int = 8,
    tpot_ms: float = 20.0,
    endpoints: list[str] | None = None,
    supports_n: bool = False,
) -> dict[str, Any]:
    """A pool entry of a policy, served by ``engine`` (a simulated engine answers one
    choice per request: ``supports_n`` false)."""
    return {
        "id": pool_id,
        "provider": provider,
        "region": region,
        "model": model,
        "upstream_model": engine.model,
        "gpu_type": "L4",
        "gpus_per_replica": gpus,
        "endpoints": endpoints or [engine.url],
        "price": {"source": "policy", "usd_per_gpu_hour": usd_per_gpu_hour},
        "goodput": {
            "tokens_per_s": tokens_per_s,
            "prefill_tokens_per_s": prefill_tokens_per_s,
            "max_concurrency": max_concurrency,
            "tpot_ms": tpot_ms,
        },
        "replicas": {"min": 0, "max": 4, "initial": 1},
        "supports_n": supports_n,
    }


def policy_doc(
    pools: list[dict[str, Any]],
    models: list[str],
    health: dict[str, Any] | None = None,
    **routing: Any,
) -> dict[str, Any]:
    """A whole policy with one client region that may use every pool at 5 ms RTT.
    ``health`` overrides the health state machine's settings."""
    locations = {f"{p['provider']}:{p['region']}" for p in pools}
    return {
        "version": 1,
        "slo_classes": {
            "interactive": {"ttft_ms": 800, "tpot_ms": 60},
            "batch": {"ttft_ms": 30000, "tpot_ms": 500},
        },
        "models": {m: {"default_slo": "interactive", "expected_output_tokens": 32} for m in models},
        "pools": pools,
        "client_regions": {"us": {"rtt_ms": {loc: 5.0 for loc in sorted(locations)}}},
        "routing": {"default_client_region": "us", **routing},
        "health": health or {},
    }


def write_policy(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def unique_prefix() -> str:
    return f"srtest:{uuid.uuid4().hex[:10]}"
