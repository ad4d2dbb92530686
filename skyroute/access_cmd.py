"""``skyroute keys create|list|revoke``, ``skyroute tenants`` and ``skyroute usage``,
through a running gateway's admin API (see ``skyroute.admin_client``)."""

from __future__ import annotations

import argparse
import time
from typing import Any

import orjson

from skyroute.admin_client import admin_client, failed


def cmd_keys_create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"tenant": args.tenant, "name": args.name or ""}
    if args.expires_in is not None:
        body["expires_in_s"] = args.expires_in
    with admin_client() as client:
        reply = client.post("/admin/keys", json=body)
    if failed(reply):
        return 1
    key = reply.json()
    # Printed once on purpose: skyroute keeps only the key's hash.
    print(f"key id  {key['id']}\ntenant  {key['tenant']}")
    print(f"secret  {key['secret']}\n(shown once; store it now)")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    with admin_client() as client:
        reply = client.get("/admin/keys", params={"tenant": args.tenant})
    if failed(reply):
        return 1
    for k in reply.json()["keys"]:
        expires = (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(k["expires_s"]))
            if k["expires_s"]
            else "never"
        )
        flag = "REVOKED" if k["revoked"] else ""
        print(f"{k['id']:<22} {k['name']:<20} expires {expires:<21} {flag}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    with admin_client() as client:
        reply = client.delete(f"/admin/keys/{args.key_id}")
    if failed(reply):
        return 1
    print(f"{args.key_id}: revoked")
    return 0


def cmd_tenants(_: argparse.Namespace) -> int:
    with admin_client() as client:
        reply = client.get("/admin/tenants")
    if failed(reply):
        return 1
    print(orjson.dumps(reply.json(), option=orjson.OPT_INDENT_2).decode())
    return 0


def cmd_usage(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"tenant": args.tenant, "group_by": args.group_by}
    if args.from_s is not None:
        params["from_s"] = args.from_s
    if args.to_s is not None:
        params["to_s"] = args.to_s
    with admin_client() as client:
        reply = client.get("/admin/usage", params=params)
    if failed(reply):
        return 1
    body = reply.json()
    head = f"{args.group_by:<36} {'requests':>9} {'prompt_tok':>11} {'output_tok':>11}"
    print(f"{head} {'cost_usd':>12}")
    for name, m in body["groups"].items():
        print(
            f"{name:<36} {m.get('requests', 0):>9} {m.get('prompt_tokens', 0):>11} "
            f"{m.get('completion_tokens', 0):>11} {m['cost_usd']:>12.6f}"
        )
    return 0


def register(sub: Any) -> None:
    """Add ``keys``, ``tenants`` and ``usage``."""
    keys = sub.add_parser("keys", help="create, list or revoke API keys").add_subparsers(
        dest="keys_command", required=True
    )
    p = keys.add_parser("create", help="create a key for a tenant (the secret is shown once)")
    p.add_argument("--tenant", required=True)
    p.add_argument("--name")
    p.add_argument("--expires-in", type=float, help="seconds until the key expires")
    p.set_defaults(func=cmd_keys_create)
    p = keys.add_parser("list", help="a tenant's keys (never their secrets)")
    p.add_argument("--tenant", required=True)
    p.set_defaults(func=cmd_keys_list)
    p = keys.add_parser("revoke", help="revoke a key on every replica")
    p.add_argument("key_id")
    p.set_defaults(func=cmd_keys_revoke)
    p = sub.add_parser("tenants", help="the effective tenants (policy + admin API)")
    p.set_defaults(func=cmd_tenants)
    p = sub.add_parser("usage", help="spend and tokens of a tenant")
    p.add_argument("--tenant", required=True)
    p.add_argument(
        "--group-by", default="total", choices=["pool", "model", "region", "provider", "total"]
    )
    p.add_argument("--from", dest="from_s", type=float, help="unix seconds (default: 24 h ago)")
    p.add_argument("--to", dest="to_s", type=float, help="unix seconds (default: now)")
    p.set_defaults(func=cmd_usage)
