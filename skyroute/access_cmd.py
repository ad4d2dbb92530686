"""``skyroute keys create|list|revoke``, ``skyroute tenants [list|create|update|delete]``
and ``skyroute usage``, through a running gateway's admin API (``skyroute.admin_client``).
The read commands take ``--output json`` for scripts."""

from __future__ import annotations

import argparse
import sys
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


def _print_json(body: Any) -> None:
    print(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode())


def cmd_keys_list(args: argparse.Namespace) -> int:
    with admin_client() as client:
        reply = client.get("/admin/keys", params={"tenant": args.tenant})
    if failed(reply):
        return 1
    if args.output == "json":
        _print_json(reply.json())
        return 0
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


def cmd_tenants(args: argparse.Namespace) -> int:
    with admin_client() as client:
        reply = client.get("/admin/tenants")
    if failed(reply):
        return 1
    tenants: dict[str, dict[str, Any]] = reply.json()
    if args.output == "json":
        _print_json(tenants)
        return 0
    head = f"{'tenant':<20} {'models':<28} {'rpm':>7} {'tpm':>9} {'budget_usd':>12}  regions"
    print(f"{head}\n{'-' * len(head)}")
    for name, t in sorted(tenants.items()):
        budget = "-" if t["budget_usd"] is None else f"{t['budget_usd']:.2f}/{t['budget_period']}"
        print(
            f"{name:<20} {','.join(t['allowed_models']):<28} {_or_dash(t['rpm']):>7} "
            f"{_or_dash(t['tpm']):>9} {budget:>12}  {','.join(t['allowed_regions'] or ['any'])}"
        )
    return 0


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


# ``tenants create|update`` flags -> TenantSpec fields (the admin API validates them).
_TENANT_FLAGS: dict[str, str] = {
    "models": "allowed_models", "regions": "allowed_regions", "client_region": "client_region",
    "default_slo": "default_slo", "rpm": "rpm", "tpm": "tpm", "budget_usd": "budget_usd",
    "budget_period": "budget_period", "priority": "priority", "max_tokens": "max_tokens",
    "max_n": "max_n",
}  # fmt: skip


def _tenant_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for flag, name in _TENANT_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            fields[name] = value.split(",") if flag in {"models", "regions"} else value
    return fields


def cmd_tenant_put(args: argparse.Namespace) -> int:
    """``create`` refuses an existing tenant; ``update`` changes only the given fields of one."""
    with admin_client() as client:
        current = client.get("/admin/tenants")
        if failed(current):
            return 1
        existing = current.json().get(args.name)
        if args.tenants_command == "create" and existing is not None:
            print(f"skyroute: tenant {args.name!r} exists; use `tenants update`", file=sys.stderr)
            return 1
        if args.tenants_command == "update" and existing is None:
            print(f"skyroute: no tenant {args.name!r}; use `tenants create`", file=sys.stderr)
            return 1
        body = {**(existing or {}), **_tenant_fields(args)}
        reply = client.put(f"/admin/tenants/{args.name}", json=body)
    if failed(reply):
        return 1
    print(f"tenant {args.name}: {'created' if existing is None else 'updated'}")
    return 0


def cmd_tenant_delete(args: argparse.Namespace) -> int:
    with admin_client() as client:
        reply = client.delete(f"/admin/tenants/{args.name}")
    if failed(reply):
        return 1
    deleted = reply.json()["deleted"]
    print(f"tenant {args.name}: {'deleted' if deleted else 'not an admin-API tenant; unchanged'}")
    return 0 if deleted else 1


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
    if args.output == "json":
        _print_json(body)
        return 0
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
    _output(p)
    p.set_defaults(func=cmd_keys_list)
    p = keys.add_parser("revoke", help="revoke a key on every replica")
    p.add_argument("key_id")
    p.set_defaults(func=cmd_keys_revoke)
    _register_tenants(sub)
    p = sub.add_parser("usage", help="spend and tokens of a tenant")
    p.add_argument("--tenant", required=True)
    p.add_argument(
        "--group-by", default="total", choices=["pool", "model", "region", "provider", "total"]
    )
    p.add_argument("--from", dest="from_s", type=float, help="unix seconds (default: 24 h ago)")
    p.add_argument("--to", dest="to_s", type=float, help="unix seconds (default: now)")
    _output(p)
    p.set_defaults(func=cmd_usage)


def _output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", choices=("table", "json"), default="table")


def _register_tenants(sub: Any) -> None:
    p = sub.add_parser("tenants", help="the effective tenants (policy + admin API); manage them")
    _output(p)
    p.set_defaults(func=cmd_tenants)
    tenants = p.add_subparsers(dest="tenants_command")
    q = tenants.add_parser("list", help="every effective tenant (the default)")
    _output(q)
    q.set_defaults(func=cmd_tenants)
    for verb, text in (("create", "add a tenant"), ("update", "change the given fields only")):
        q = tenants.add_parser(verb, help=text)
        q.add_argument("name")
        q.add_argument("--models", help="allowed models, comma-separated, or *")
        q.add_argument(
            "--regions", help="allowed pool locations (provider:region), comma-separated"
        )
        q.add_argument("--client-region", help="the tenant's client region")
        q.add_argument("--default-slo", help="the tenant's default SLO class")
        q.add_argument("--rpm", type=int, help="requests per minute")
        q.add_argument("--tpm", type=int, help="tokens per minute")
        q.add_argument("--budget-usd", type=float, help="budget per period, USD")
        q.add_argument("--budget-period", choices=("hour", "day", "month"))
        q.add_argument("--priority", type=int)
        q.add_argument("--max-tokens", type=int, help="cap on max_tokens per request")
        q.add_argument("--max-n", type=int, help="cap on n per request")
        q.set_defaults(func=cmd_tenant_put)
    q = tenants.add_parser("delete", help="forget an admin-API tenant")
    q.add_argument("name")
    q.set_defaults(func=cmd_tenant_delete)
