"""The live dashboard page: its admin credential check, and the page itself rendered by
real headless Chromium against a real fleet while requests flow."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.settings import GatewaySettings
from skyroute.demo import demo_policy_path
from tests.gateway.conftest import CHAT
from tests.gateway.harness import ADMIN_TOKEN, API_KEY, Gateway, wait_for

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
CHROMIUM_TIMEOUT_S = 90
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}  # fmt: skip


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def app_client(redis_url: str) -> Iterator[TestClient]:
    """The real app (no lifespan: only the page route is exercised)."""
    settings = GatewaySettings(
        policy=demo_policy_path(),
        redis_url=redis_url,
        api_key=SecretStr(API_KEY),
        admin_token=SecretStr(ADMIN_TOKEN),
    )
    app = create_app(settings)
    client = TestClient(app, base_url="http://127.0.0.1")
    try:
        yield client
    finally:
        client.close()


@pytest.mark.parametrize(
    "authorization",
    [None, f"Bearer {API_KEY}", basic("admin", "wrong-token"), "Basic !!notbase64"],
    ids=["missing", "client-key", "wrong-basic", "malformed-basic"],
)
def test_dashboard_without_admin_credential_is_401_with_basic_challenge(
    app_client: TestClient, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    response = app_client.get("/dashboard", headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Basic realm="skyroute"'
    assert response.json()["error"]["type"] == "authentication_error"
    assert "<html" not in response.text


def test_dashboard_with_basic_admin_credential_serves_the_page_with_a_fresh_nonce(
    app_client: TestClient,
) -> None:
    pages = [
        app_client.get("/dashboard", headers={"Authorization": basic("admin", ADMIN_TOKEN)})
        for _ in range(2)
    ]
    for page in pages:
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        nonce = page.headers["content-security-policy"].split("'nonce-")[1].split("'")[0]
        assert f'<script nonce="{nonce}">' in page.text
        assert "__CSP_NONCE__" not in page.text
        for element_id in ("pools", "decisions", "spend", "traffic"):
            assert f'id="{element_id}"' in page.text
    assert (
        pages[0].headers["content-security-policy"] != pages[1].headers["content-security-policy"]
    )


class _Elements(HTMLParser):
    """Text of the elements with the wanted ids, and the attributes of every ``<tr>``
    inside them, with the text of each of its cells by class."""

    def __init__(self, ids: set[str]) -> None:
        super().__init__()
        self.ids = ids
        self.text: dict[str, list[str]] = {i: [] for i in ids}
        self.rows: dict[str, list[dict[str, str]]] = {i: [] for i in ids}
        self.attrs: dict[str, dict[str, str]] = {}
        self._stack: list[tuple[str, str | None]] = []  # (tag, id of the enclosing target)
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "body":
            self.attrs["body"] = a
        if tag in _VOID:
            return
        inside = self._stack[-1][1] if self._stack else None
        if a.get("id") in self.ids:
            inside = a["id"]
            self.attrs[inside] = a
        if inside and tag == "tr":
            self.rows[inside].append(dict(a))
        if inside and tag == "td" and self.rows[inside]:
            self._cell = a.get("class", "")
            self.rows[inside][-1].setdefault(f"td.{self._cell}", "")
        self._stack.append((tag, inside))

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        while self._stack:
            if self._stack.pop()[0] == tag:
                break
        if tag == "td":
            self._cell = None

    def handle_data(self, data: str) -> None:
        inside = self._stack[-1][1] if self._stack else None
        if inside:
            self.text[inside].append(data)
            if self._cell is not None and self.rows[inside]:
                self.rows[inside][-1][f"td.{self._cell}"] += data


@pytest.fixture
def chromium(tmp_path: Path) -> list[str]:
    """The headless Chromium command line (Debian's package; scripts/setup installs it)."""
    binary = shutil.which("chromium")
    if binary is None:
        pytest.skip("chromium is not on PATH: run scripts/setup as root (apt-get install chromium)")
    return [
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--mute-audio",
        "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1280,900", "--virtual-time-budget=5000",
    ]  # fmt: skip


class _Traffic:
    """Chat requests sent one after another from a thread until stopped."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.ok = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dashboard-traffic", daemon=True)

    def send(self, client: httpx.Client, stream: bool) -> None:
        body = {
            "model": CHAT,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 8,
            "stream": stream,
        }
        try:
            response = client.post(f"{self.base}/v1/chat/completions", json=body)
        except httpx.HTTPError:
            self.failed += 1
            return
        self.ok += response.status_code == 200
        self.failed += response.status_code != 200

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        with httpx.Client(headers=headers, timeout=10) as client:
            stream = False
            while not self._stop.is_set():
                self.send(client, stream)  # streamed ones measure TTFT
                stream = not stream

    def __enter__(self) -> _Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        assert not self._thread.is_alive()


def run_chromium(command: list[str]) -> str:
    """Run Chromium to completion and return its stdout; on timeout, kill its whole
    process group (the browser and its helpers)."""
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=CHROMIUM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
        raise
    assert proc.returncode == 0, stderr[-2000:]
    return stdout


def test_dashboard_data_has_every_pools_replicas_with_their_state_and_load(
    gateway: Gateway,
) -> None:
    pool_ids = [p["id"] for p in gateway.admin("GET", "/admin/pools").json()["pools"]]
    body = httpx.post(
        f"{gateway.base}/v1/chat/completions",
        json={"model": CHAT, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=30,
    )
    assert body.status_code == 200
    served_by = body.headers["x-skyroute-pool"]
    data = gateway.admin("GET", "/admin/dashboard/data").json()
    assert sorted(data["replicas"]) == sorted(pool_ids)
    fields = {"address", "state", "inflight", "engine_running", "engine_waiting",
              "kv_cache_usage", "ttft_ms", "tpot_ms", "errors", "served"}  # fmt: skip
    for replicas in data["replicas"].values():
        assert replicas and all(fields <= set(r) for r in replicas)
    served = [r for r in data["replicas"][served_by] if r["served"]]
    assert len(served) == 1 and served[0]["state"] == "ready"


def test_dashboard_in_chromium_shows_every_pool_and_live_decisions(
    gateway: Gateway, chromium: list[str]
) -> None:
    pool_ids = [p["id"] for p in gateway.admin("GET", "/admin/pools").json()["pools"]]
    url = f"http://admin:{ADMIN_TOKEN}@127.0.0.1:{gateway.port}/dashboard"
    served = httpx.get(f"{gateway.base}/dashboard", auth=("admin", ADMIN_TOKEN), timeout=5)
    assert served.status_code == 200, "the gateway does not serve /dashboard"
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot = ARTIFACTS / "dashboard.png"
    screenshot.unlink(missing_ok=True)

    # Traffic goes to the cheap gcp pool, then to aws once gcp is drained, so the page
    # has a state change and a shift of traffic share to show.
    with _Traffic(gateway.base) as traffic:
        time.sleep(2.0)
        drained = gateway.admin("POST", "/admin/pools/gcp:us-central1:cheap/drain")
        assert drained.status_code == 200
        time.sleep(2.0)
        dom = run_chromium([*chromium, "--dump-dom", url])
        run_chromium([*chromium, f"--screenshot={screenshot}", url])
    assert traffic.ok > 0
    assert traffic.failed == 0

    page = _Elements(
        {"pools", "replicas", "decisions", "spend", "traffic", "status", "replica-chart", "cost"}
    )
    page.feed(dom)
    assert int(page.attrs["body"].get("data-polls", "0")) >= 2, "the page did not poll repeatedly"
    assert "".join(page.text["status"]).startswith("live")
    assert [row["data-pool"] for row in page.rows["pools"]] == pool_ids
    states = {row["data-pool"]: row["data-state"] for row in page.rows["pools"]}
    assert states["gcp:us-central1:cheap"] == "draining"
    replicas = [row for row in page.rows["replicas"] if row.get("data-replica")]
    assert {row["data-pool"] for row in replicas} == set(pool_ids)
    assert all(row["data-state"] == "ready" for row in replicas)
    # The replicas that served show it, with their measured TTFT and the engine's KV use.
    serving = [row for row in replicas if row["td.num served"] not in ("0", "–")]
    assert serving and any(row["td.num ttft"] != "–" for row in serving)
    assert all(row["td.kv"].endswith("%") for row in serving)
    decisions = [row for row in page.rows["decisions"] if row.get("data-pool")]
    assert decisions, "no routing decision shown"
    assert {row["data-pool"] for row in decisions} <= set(pool_ids)
    assert all(row["td.reason"] in {"cheapest-feasible", "fallback-fastest"} for row in decisions)
    assert {"gcp", "aws"} <= {row.get("data-provider") for row in page.rows["spend"]}
    assert {"gcp", "aws"} <= set(page.attrs["traffic"]["data-providers"].split(","))
    # Replicas per pool and the fleet's cost rate over time, next to the traffic.
    assert int(page.attrs["replica-chart"].get("data-samples", "0")) >= 1
    assert set(page.attrs["replica-chart"]["data-pools"].split(",")) <= set(pool_ids)
    assert float(page.attrs["cost"]["data-usd-per-hour"]) > 0

    png = screenshot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1280, 900)
    assert len(png) > 30_000, f"screenshot is only {len(png)} bytes: a blank page?"


def test_fleet_history_api_gives_replicas_and_cost_over_time_to_the_admin_only(
    gateway: Gateway,
) -> None:
    url = f"{gateway.base}/admin/dashboard/fleet"
    assert httpx.get(url, timeout=5).status_code == 401
    assert (
        httpx.get(url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=5).status_code == 401
    )
    pools = {p["id"]: p for p in gateway.admin("GET", "/admin/pools").json()["pools"]}

    def samples() -> list[dict[str, object]]:
        body = gateway.admin("GET", "/admin/dashboard/fleet").json()
        assert body["every_s"] > 0
        return list(body["samples"])

    wait_for(lambda: len(samples()) >= 2, "two fleet samples")
    first, last = samples()[-2:]
    assert isinstance(first["t"], float) and isinstance(last["t"], float)
    assert first["t"] < last["t"]
    assert set(last["ready"]) == set(pools)  # type: ignore[arg-type]
    by_provider = last["usd_per_hour_by_provider"]
    assert isinstance(by_provider, dict) and by_provider
    # The cost rate is every priced pool's ready replicas at its price, per provider.
    assert last["usd_per_hour"] == pytest.approx(sum(by_provider.values()), abs=1e-3)
    assert set(by_provider) <= {p["provider"] for p in pools.values()}
