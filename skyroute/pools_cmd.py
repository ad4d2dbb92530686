"""``skyroute pools`` and ``skyroute pool drain|uncordon ID``: the fleet's health through
the admin API of a running gateway, found through :mod:`skyroute.context`."""

from __future__ import annotations

import argparse
from typing import Any

import httpx
import orjson

from skyroute.admin_client import admin_client, failed
from skyroute.columns import cell

# Long enough for any drain deadline an operator would set; the server ends the wait first.
_DRAIN_WAIT_CAP_S = 900.0


def render_pools(pools: list[dict[str, Any]]) -> str:
    """The pools as a fixed-width table."""
    head = (
        f"{'pool':<36} {'state':<9} {'infl':>5} {'ready':>5} {'ttft_ms':>8} {'tpot_ms':>8} "
        f"{'probe_ms':>8} {'$/gpu-h':>8}  flags / reason"
    )
    lines = [head, "-" * len(head)]
    for p in pools:
        flags = "NEEDS-REPLACEMENT " if p["needs_replacement"] else ""
        if p["weight"] is not None and 0 < p["weight"] < 1:
            flags += f"ramp {p['weight']:.0%} "
        lines.append(
            f"{p['id']:<36} {p['state']:<9} {p['inflight']:>5.0f} "
            f"{cell(p['ready_replicas'], '>5.0f')} {cell(p['ttft_ewma_ms'], '>8.0f')} "
            f"{cell(p['tpot_ewma_ms'], '>8.1f')} {cell(p['rtt_ms'], '>8.1f')} "
            f"{cell(p['usd_per_gpu_hour'], '>8.3f')}  {flags}{p['reason']}"
        )
    return "\n".join(lines)


def render_replicas(replicas: list[dict[str, Any]]) -> str:
    """One pool's replicas (``GET /admin/pools/{id}``), indented under its row: engine
    running/waiting and KV-cache use from the last scrape, its age, recent TTFT and TPOT
    (ms), failures, errors."""
    lines = [
        f"    {'replica':<32} {'state':<17} {'infl':>5} {'run':>5} {'wait':>5} {'kv%':>5} "
        f"{'ttft':>6} {'tpot':>6} {'age_s':>6} {'fails':>5} {'errors':>6} {'served':>7}"
    ]
    for r in replicas:
        kv = r["kv_cache_usage"] * 100 if r["kv_cache_usage"] is not None else None
        fails = max(r["scrape_failures"], r["request_failures"])
        lines.append(
            f"    {r['address']:<32} {r['state']:<17} {r['inflight']:>5.0f} "
            f"{cell(r['engine_running'], '>5.0f')} {cell(r['engine_waiting'], '>5.0f')} "
            f"{cell(kv, '>5.0f')} {cell(r.get('ttft_ms'), '>6.0f')} "
            f"{cell(r.get('tpot_ms'), '>6.1f')} {cell(r['scrape_age_s'], '>6.1f')} {fails:>5} "
            f"{r['errors']:>6} {r['served']:>7}"
        )
    return "\n".join(lines)


def cmd_pools(args: argparse.Namespace) -> int:
    with admin_client() as client:
        reply = client.get("/admin/pools")
        if failed(reply):
            return 1
        pools = reply.json()["pools"]
        if args.replicas:
            for p in pools:
                detail = client.get(f"/admin/pools/{p['id']}")
                if failed(detail):
                    return 1
                p["replicas"] = detail.json()["replicas"]
    if args.output == "json":
        print(orjson.dumps(pools, option=orjson.OPT_INDENT_2).decode())
    elif args.replicas:
        table = render_pools(pools).splitlines()
        print("\n".join(table[:2]))
        for row, p in zip(table[2:], pools, strict=True):
            print(row)
            print(render_replicas(p["replicas"]))
    else:
        print(render_pools(pools))
    return 0


def cmd_drain(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"wait": "true" if args.wait else "false"}
    if args.deadline is not None:
        params["deadline_s"] = args.deadline
    with admin_client() as client:
        timeout = client.timeout
        if args.wait:
            wait_s = args.deadline if args.deadline is not None else _DRAIN_WAIT_CAP_S
            timeout = httpx.Timeout(wait_s + 10.0, connect=3.0)
        reply = client.post(f"/admin/pools/{args.pool_id}/drain", params=params, timeout=timeout)
    if failed(reply):
        return 1
    body = reply.json()
    if body["drained"]:
        print(
            f"{args.pool_id}: drained (in-flight 0 on every replica after {body['waited_s']:.1f}s)"
        )
        return 0
    status = "still has" if args.wait else "cordoned; it has"
    print(f"{args.pool_id}: {status} {body['inflight']:.0f} request(s) in flight")
    return 2 if args.wait else 0


def cmd_uncordon(args: argparse.Namespace) -> int:
    with admin_client() as client:
        reply = client.post(f"/admin/pools/{args.pool_id}/uncordon")
    if failed(reply):
        return 1
    print(f"{args.pool_id}: {reply.json()['state']}")
    return 0


def cmd_replica_drain(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"address": args.address, "wait": "true" if args.wait else "false"}
    if args.deadline is not None:
        params["deadline_s"] = args.deadline
    with admin_client() as client:
        timeout = client.timeout
        if args.wait:
            wait_s = args.deadline if args.deadline is not None else _DRAIN_WAIT_CAP_S
            timeout = httpx.Timeout(wait_s + 10.0, connect=3.0)
        reply = client.post(
            f"/admin/pools/{args.pool_id}/replicas/drain", params=params, timeout=timeout
        )
    if failed(reply):
        return 1
    body = reply.json()
    where = f"{args.pool_id} {body['address']}"
    if body["drained"]:
        print(f"{where}: drained (no request left on it after {body['waited_s']:.1f}s)")
        return 0
    left = (
        "unknown until its next scrape" if body["inflight"] is None else f"{body['inflight']:.0f}"
    )
    status = "still has" if args.wait else "takes no new requests; it has"
    print(f"{where}: {status} {left} request(s) running or waiting")
    return 2 if args.wait else 0


def cmd_replica_uncordon(args: argparse.Namespace) -> int:
    with admin_client() as client:
        reply = client.post(
            f"/admin/pools/{args.pool_id}/replicas/uncordon", params={"address": args.address}
        )
    if failed(reply):
        return 1
    body = reply.json()
    print(f"{args.pool_id} {body['address']}: {body['state']}")
    return 0


def register(sub: Any) -> None:
    """Add ``pools``, ``pool drain|uncordon`` and ``replica drain|uncordon``."""
    p = sub.add_parser(
        "pools", help="table of every pool: state, in-flight, latency, price, replicas"
    )
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.add_argument(
        "--replicas", action="store_true", help="each pool's replicas too (engine load, state)"
    )
    p.set_defaults(func=cmd_pools)
    p = sub.add_parser("pool", help="cordon/drain or uncordon one pool")
    pool_sub = p.add_subparsers(dest="pool_command", required=True)
    d = pool_sub.add_parser(
        "drain", help="stop new requests at once; --wait for in-flight to finish"
    )
    d.add_argument("pool_id")
    d.add_argument(
        "--wait", action="store_true", help="wait until in-flight reaches zero on every replica"
    )
    d.add_argument("--deadline", type=float, help="seconds to wait at most (default: the policy's)")
    d.set_defaults(func=cmd_drain)
    u = pool_sub.add_parser("uncordon", help="bring a drained pool back")
    u.add_argument("pool_id")
    u.set_defaults(func=cmd_uncordon)
    r = sub.add_parser("replica", help="drain or uncordon one replica of a pool")
    replica_sub = r.add_subparsers(dest="replica_command", required=True)
    d = replica_sub.add_parser(
        "drain", help="no new requests to one replica; --wait until its engine is idle"
    )
    d.add_argument("pool_id")
    d.add_argument("address", help="the replica's base URL, as `skyroute pools --replicas` shows")
    d.add_argument("--wait", action="store_true", help="wait until it runs no request")
    d.add_argument("--deadline", type=float, help="seconds to wait at most (default: the policy's)")
    d.set_defaults(func=cmd_replica_drain)
    u = replica_sub.add_parser("uncordon", help="let a drained replica take requests again")
    u.add_argument("pool_id")
    u.add_argument("address")
    u.set_defaults(func=cmd_replica_uncordon)
