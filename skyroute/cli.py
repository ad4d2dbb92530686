"""The ``skyroute`` command line: one program, many subcommands.

This is the composition root: the only package that imports every other. A subcommand's
modules are imported when it runs, never at start-up: ``skyroute --help`` lists the
subcommands from :data:`COMMANDS` without importing them, and ``skyroute serve`` imports
the gateway but not the simulator, the autoscaler or any cloud SDK.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from base.errors import PolicyError, SkyrouteError
from skyroute import logs
from skyroute.redis_import import import_redis

if TYPE_CHECKING:
    from gateway.settings import GatewaySettings


def _settings(args: argparse.Namespace) -> GatewaySettings:
    from gateway.settings import GatewaySettings  # noqa: PLC0415 - see the module docstring

    overrides = {
        k: v for k, v in {"port": args.port, "host": args.host, "policy": args.policy}.items() if v
    }
    return GatewaySettings(**overrides)


def cmd_serve(args: argparse.Namespace) -> int:
    if args.workers <= 1:
        # What a worker loads and builds before it serves stays alive as long as it
        # does: collecting meanwhile finds next to nothing. run_gateway turns the
        # collector back on (serve.tune_gc).
        gc.disable()
    from skyroute.serve import redis_for, run_gateway  # noqa: PLC0415 - keep start-up light

    settings = _settings(args)
    logs.configure(settings.log_level, settings.log_json)
    with redis_for(settings) as live:
        if args.workers > 1:
            from skyroute.workers import STOP_MARGIN_S, run_workers  # noqa: PLC0415

            env = {
                **os.environ,
                "SKYROUTE_REDIS_URL": str(live.redis_url),
                "SKYROUTE_HOST": live.host,
                "SKYROUTE_POLICY": str(live.policy.resolve()),
            }
            stop_s = live.drain_delay_s + live.shutdown_timeout_s + STOP_MARGIN_S
            return run_workers(args.workers, live.host, live.port, env, stop_s)
        run_gateway(live)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from skyroute.demo import demo_policy_path, run_demo  # noqa: PLC0415

    settings = _settings(args)
    if not args.policy and "policy" not in settings.model_fields_set:
        settings = settings.model_copy(update={"policy": demo_policy_path()})
    logs.configure(settings.log_level, json=False)
    if args.load:
        # One access-log line per request would bury the burst's timeline in the terminal.
        logging.getLogger("skyroute.access").setLevel(logging.WARNING)
    run_demo(settings, time_scale=args.time_scale, load=[] if args.load else None)
    return 0


def cmd_engine(args: argparse.Namespace) -> int:
    from simengine.server import run_engine  # noqa: PLC0415

    logs.configure(args.log_level, json=False)
    run_engine(args.host, args.port, args.profile, args.model, args.seed, args.time_scale)
    return 0


def cmd_policy_check(args: argparse.Namespace) -> int:
    from live.policy_file import load_policy  # noqa: PLC0415

    try:
        policy = load_policy(args.file)
    except PolicyError as exc:
        for problem in exc.problems:
            print(
                f"{exc.source}:{problem.line}: {problem.path or '<root>'}: {problem.message}",
                file=sys.stderr,
            )
        print(f"{len(exc.problems)} problem(s); the policy is invalid", file=sys.stderr)
        return 1
    print(f"{args.file}: ok ({len(policy.pools)} pools, {len(policy.models)} models)")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from live.policy_file import load_policy  # noqa: PLC0415
    from router.compiled import compile_policy  # noqa: PLC0415
    from router.scoring import RouteRequest  # noqa: PLC0415
    from skyroute.context import policy_path, redis_target  # noqa: PLC0415
    from skyroute.explain import explain  # noqa: PLC0415

    compiled = compile_policy(load_policy(policy_path(args.policy)))
    redis_url, prefix = redis_target()
    model = compiled.policy.models.get(args.model)
    request = RouteRequest(
        model=args.model,
        prompt_tokens=args.prompt_tokens,
        max_output_tokens=args.max_tokens,
        slo_class=args.slo or (model.default_slo if model else ""),
        client_region=args.client_region or compiled.policy.routing.default_client_region,
    )
    print(explain(compiled, request, redis_url, prefix or "sr:v1", compare=args.compare))
    return 0


# Subcommands defined in modules of their own: name -> (module, one-line help). Each
# module has ``register(subparsers)``, which adds its parsers and sets ``func`` (taking
# the parsed args, returning an exit code). Only the module of the subcommand being run
# is imported; the others appear in ``--help`` with the help given here.
COMMANDS: dict[str, tuple[str, str]] = {
    "pools": ("skyroute.pools_cmd", "table of every pool: state, in-flight, latency, price"),
    "pool": ("skyroute.pools_cmd", "cordon/drain or uncordon one pool"),
    "replica": ("skyroute.pools_cmd", "drain or uncordon one replica of a pool"),
    "keys": ("skyroute.access_cmd", "create, list or revoke API keys"),
    "tenants": ("skyroute.access_cmd", "the effective tenants (policy + admin API)"),
    "usage": ("skyroute.access_cmd", "spend and tokens of a tenant"),
    "prices": ("skyroute.prices_cmd", "GPU price feeds: refresh, watch, show, set"),
    "autoscale": ("skyroute.autoscale_cmd", "run the autoscaler sidecar: forecast, plan, resize"),
    "profile": ("skyroute.autoscale_cmd", "measure a goodput profile against an engine"),
    "simulate": ("skyroute.simulate_cmd", "replay a request trace through routing policies"),
    "load": ("skyroute.load_cmd", "drive a bounded burst at the gateway; report the scaling"),
    "store-worker": (
        "skyroute.store_worker_cmd",
        "migrate the store, refill Redis and write the usage ledger (gateways: external)",
    ),
    "rollout": ("skyroute.rollout_cmd", "roll a new model version out: gate, shadow, canary"),
}


# Subcommands that never talk to Redis: they skip ``import_redis`` (the others import
# redis anyway, and should do it through there first).
REDIS_FREE = frozenset({"engine", "policy", "explain", "simulate", "profile"})


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (its first word that is not an option)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: every subcommand, with the full arguments of ``command``
    (importing its module) and of the built-in ones; the other modules' subcommands are
    placeholders that carry their help line (all of them when ``command`` is None)."""
    parser = argparse.ArgumentParser(
        prog="skyroute",
        description="Multi-cloud LLM inference routing gateway.",
        epilog="--debug (anywhere on the line): print the traceback of an unexpected failure",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    if command in COMMANDS:
        importlib.import_module(COMMANDS[command][0]).register(sub)
    for name, (_, help_line) in COMMANDS.items():
        if name not in sub.choices:
            sub.add_parser(name, help=help_line, add_help=False)

    def server_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--port", type=int, help="listen port (env SKYROUTE_PORT, default 8080)")
        p.add_argument("--host", help="listen address (env SKYROUTE_HOST, default 127.0.0.1)")
        p.add_argument("--policy", help="routing policy YAML (env SKYROUTE_POLICY)")

    p = sub.add_parser("serve", help="run the gateway")
    server_args(p)
    p.add_argument(
        "--workers", type=int, default=1, help="gateway processes on the port (SO_REUSEPORT)"
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("demo", help="embedded Redis + simulated multi-cloud fleet + gateway")
    server_args(p)
    p.add_argument(
        "--time-scale", type=float, default=1.0, help="engine sleep multiplier (0: no sleeps)"
    )
    p.add_argument(
        "--load",
        action="store_true",
        help="once up, drive one bounded burst (`skyroute load`) and report the scaling",
    )
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("engine", help="run a simulated OpenAI-compatible inference engine")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument(
        "--profile", required=True, help="GPU/model latency profile, e.g. h100-llama-3.1-70b"
    )
    p.add_argument("--model", default="served-model", help="model name the engine serves")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=cmd_engine)

    p = sub.add_parser("policy", help="routing policy tools")
    policy_sub = p.add_subparsers(dest="policy_command", required=True)
    check = policy_sub.add_parser("check", help="validate a policy file; exit 1 with each problem")
    check.add_argument("file")
    check.set_defaults(func=cmd_policy_check)

    p = sub.add_parser("explain", help="print the router's ranking for a request")
    p.add_argument("--model", required=True)
    p.add_argument("--prompt-tokens", type=int, required=True)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--slo", help="SLO class (default: the model's)")
    p.add_argument("--client-region", help="client region (default: the policy's)")
    p.add_argument("--policy", help="routing policy YAML (env SKYROUTE_POLICY)")
    p.add_argument("--compare", action="store_true", help="also show what each baseline would pick")
    p.set_defaults(func=cmd_explain)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``skyroute`` console script.

    Every failure is one line on stderr and exit code 1 (130 on Ctrl-C); ``--debug``
    prints the traceback of an unexpected one as well.
    """
    words = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in words
    words = [w for w in words if w != "--debug"]
    command = _command_of(words)
    if command is not None and command not in REDIS_FREE:
        import_redis()  # before any module of the command imports redis
    args = build_parser(command).parse_args(words)
    try:
        code = int(args.func(args))
    except SkyrouteError as exc:
        print(f"skyroute: {exc}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:
        if debug:
            raise
        print(
            f"skyroute: {type(exc).__name__}: {exc} (run again with --debug for the traceback)",
            file=sys.stderr,
        )
        code = 1
    sys.exit(code)
