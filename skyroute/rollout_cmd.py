"""``skyroute rollout start|status|pause|resume|promote|abort``: roll a new version of a
model out through the admin API of a running gateway (:mod:`skyroute.context` finds it).

``start --plan FILE`` reads the plan's YAML, and the golden requests its validation gate
names (a YAML list, relative to the plan's file), into the request: whichever sidecar
leads can then run them without the file.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import orjson
import yaml

from base.errors import CommandError
from skyroute.admin_client import admin_client, failed


def read_plan(path: Path) -> dict[str, Any]:
    """The plan at ``path`` with its golden requests read in. Raises CommandError."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise CommandError(f"cannot read the rollout plan {path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise CommandError(f"the rollout plan {path} is not a YAML mapping")
    gate = doc.get("validation")
    if isinstance(gate, dict) and gate.get("golden") and not gate.get("requests"):
        golden = path.parent / str(gate["golden"])
        try:
            requests = yaml.safe_load(golden.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise CommandError(f"cannot read the golden requests {golden}: {exc}") from exc
        if not isinstance(requests, list):
            raise CommandError(f"{golden}: expected a YAML list of golden requests")
        doc["validation"] = {**gate, "requests": requests}
    return doc


def render(r: dict[str, Any]) -> str:
    """One rollout, as ``status`` prints it."""
    stage = r["stage"] + (" (paused)" if r["paused"] else "")
    if r["stage"] == "canary":
        stage += f" step {r['step'] + 1}/{r['steps']}"
    age = time.time() - r["stage_started_s"]
    lines = [
        f"{r['model']}: {r['stable']} -> {r['canary']}  {stage}, {age:.0f}s in this stage",
        f"  traffic to {r['canary']}: {r['share']:.1%} (shadow copies {r['shadow_share']:.1%}); "
        f"requests it served so far: {r['exposed']} (bound {r['max_exposed']})",
    ]
    if r.get("evidence"):
        lines.append("  evidence of this stage:")
        lines += [f"    {line}" for line in r["evidence"]]
    for t in r.get("transitions", [])[:10]:
        when = time.strftime("%H:%M:%S", time.localtime(t["at_s"]))
        lines.append(f"  {when} {t['from']} -> {t['to']} (step {t['step'] + 1}): {t['reason']}")
    return "\n".join(lines)


def cmd_start(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"model": args.model, "to": args.to}
    if args.plan is not None:
        body["plan"] = read_plan(Path(args.plan))
    with admin_client() as client:
        reply = client.post("/admin/rollouts", json=body)
    if failed(reply):
        return 1
    r = reply.json()
    print(f"{r['model']}: rolling {r['stable']} -> {r['canary']} ({r['id']}), now {r['stage']}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with admin_client() as client:
        if args.model:
            reply = client.get(f"/admin/rollouts/{args.model}")
            if failed(reply):
                return 1
            rollouts = [reply.json()]
        else:
            reply = client.get("/admin/rollouts")
            if failed(reply):
                return 1
            rollouts = reply.json()
    if args.output == "json":
        print(orjson.dumps(rollouts, option=orjson.OPT_INDENT_2).decode())
    elif not rollouts:
        print("no rollouts")
    else:
        print("\n".join(render(r) for r in rollouts))
    return 0


def cmd_action(args: argparse.Namespace) -> int:
    with admin_client() as client:
        reply = client.post(f"/admin/rollouts/{args.model}/{args.rollout_command}")
    if failed(reply):
        return 1
    r = reply.json()
    print(f"{r['model']}: {r['stage']}" + (" (paused)" if r["paused"] else ""))
    return 0


def register(sub: Any) -> None:
    """Add ``rollout start|status|pause|resume|promote|abort``."""
    p = sub.add_parser("rollout", help="roll a new model version out: gate, shadow, canary")
    r = p.add_subparsers(dest="rollout_command", required=True)
    s = r.add_parser("start", help="start rolling VERSION out for MODEL")
    s.add_argument("model")
    s.add_argument("--to", required=True, help="the version (pools' `version:`) to roll out")
    s.add_argument("--plan", help="rollout plan (YAML; default: the built-in plan)")
    s.set_defaults(func=cmd_start)
    st = r.add_parser("status", help="the rollouts, or one model's with its evidence")
    st.add_argument("model", nargs="?")
    st.add_argument("--output", choices=("table", "json"), default="table")
    st.set_defaults(func=cmd_status)
    for action, text in (
        ("pause", "hold the rollout where it is (the canary's share goes to stable)"),
        ("resume", "carry on from the same stage"),
        ("promote", "give the new version all the traffic now"),
        ("abort", "roll back now"),
    ):
        a = r.add_parser(action, help=text)
        a.add_argument("model")
        a.set_defaults(func=cmd_action)
