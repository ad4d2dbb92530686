"""Where the command line finds its gateway: the environment first, then a context file.

``skyroute demo`` (or an operator) writes a context: the gateway's URL, the path of a
file holding the admin credential (mode 0600, never the credential itself), the Redis
URL and prefix, and the policy path. Every subcommand resolves each value in this order:

1. its ``SKYROUTE_*`` environment variable (``SKYROUTE_ADMIN_URL``,
   ``SKYROUTE_ADMIN_TOKEN``, ``SKYROUTE_REDIS_URL``, ``SKYROUTE_REDIS_PREFIX``,
   ``SKYROUTE_POLICY``);
2. the context file: ``SKYROUTE_CONTEXT`` if set, else
   ``$XDG_CONFIG_HOME/skyroute/context.json`` (``~/.config/skyroute/context.json``);
3. the built-in default (``http://127.0.0.1:$SKYROUTE_PORT``, port 8080).

A context file that exists but cannot be read is an error with what to do, never a
silent fallback to defaults that would talk to some other gateway.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from base.errors import CommandError

ENV_CONTEXT = "SKYROUTE_CONTEXT"


@dataclass(frozen=True)
class Context:
    """What a subcommand needs to reach a running gateway. Paths are absolute."""

    url: str
    admin_token_file: str | None = None
    # A client API key of the demo's, for load tests (``loadtests/locustfile.py``).
    api_key_file: str | None = None
    redis_url: str | None = None
    redis_prefix: str | None = None
    policy: str | None = None
    # Which adapter serves each cloud's pools (``SKYROUTE_CLOUD_ADAPTER_FOR``): the demo
    # runs them all on the ``local`` provider.
    cloud_adapter_for: dict[str, str] | None = None


def context_path() -> Path:
    """The context file in force (it may not exist)."""
    explicit = os.environ.get(ENV_CONTEXT)
    if explicit:
        return Path(explicit)
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "skyroute" / "context.json"


def write_context(
    context: Context,
    admin_token: str | None,
    path: Path | None = None,
    api_key: str | None = None,
) -> Path:
    """Write ``context`` atomically, and ``admin_token`` / ``api_key`` (if given) into
    ``admin_token_file`` / ``api_key_file`` (default: next to the context), mode 0600.
    Idempotent. Returns the context file's path."""
    path = path or context_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fields = asdict(context)
    for secret, name, default in (
        (admin_token, "admin_token_file", "admin-token"),
        (api_key, "api_key_file", "api-key"),
    ):
        if secret is not None:
            target = Path(fields[name] or path.with_name(default))
            _write_private(target, secret + "\n")
            fields[name] = str(target)
    _write_private(path, json.dumps(fields, indent=2) + "\n")
    return path


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(tmp, path)


def read_context() -> Context | None:
    """The context file's contents, or None if there is none.

    Raises CommandError if the file exists but is not a valid context.
    """
    path = context_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Context(**data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise CommandError(
            f"cannot read the context file {path} ({exc}); delete it or run `skyroute demo`"
        ) from exc


def gateway_url() -> str:
    """The gateway's base URL (see the module docstring for the order)."""
    explicit = os.environ.get("SKYROUTE_ADMIN_URL")
    if explicit:
        return explicit.rstrip("/")
    context = read_context()
    if context is not None:
        return context.url.rstrip("/")
    return f"http://127.0.0.1:{os.environ.get('SKYROUTE_PORT', '8080')}"


def admin_token() -> str:
    """The admin credential. Raises CommandError saying how to provide one."""
    explicit = os.environ.get("SKYROUTE_ADMIN_TOKEN")
    if explicit:
        return explicit
    context = read_context()
    if context is not None and context.admin_token_file:
        try:
            return Path(context.admin_token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CommandError(
                f"cannot read the admin credential file {context.admin_token_file}: "
                f"{exc.strerror}; restart `skyroute demo` or set SKYROUTE_ADMIN_TOKEN"
            ) from exc
    raise CommandError(
        "no admin credential: start `skyroute demo` (it writes a context for the CLI) "
        "or set SKYROUTE_ADMIN_TOKEN (and SKYROUTE_ADMIN_URL) for your gateway"
    )


def api_key() -> str | None:
    """A client API key: ``SKYROUTE_API_KEY``, else the context's (the demo's), else None."""
    explicit = os.environ.get("SKYROUTE_API_KEY")
    if explicit:
        return explicit
    context = read_context()
    if context is None or not context.api_key_file:
        return None
    try:
        return Path(context.api_key_file).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def redis_target() -> tuple[str | None, str | None]:
    """(Redis URL, key prefix) from the environment, else the context, else (None, None)."""
    url = os.environ.get("SKYROUTE_REDIS_URL")
    prefix = os.environ.get("SKYROUTE_REDIS_PREFIX")
    context = read_context()
    if context is not None:
        url = url or context.redis_url
        prefix = prefix or context.redis_prefix
    return url, prefix


def policy_path(explicit: str | None) -> Path:
    """The policy file: ``explicit`` (a ``--policy`` flag), else ``SKYROUTE_POLICY``, else
    the context's. Raises CommandError naming the three ways to give one."""
    chosen = explicit or os.environ.get("SKYROUTE_POLICY")
    if not chosen:
        context = read_context()
        chosen = context.policy if context is not None else None
    if not chosen:
        raise CommandError(
            "no policy file: pass --policy FILE, set SKYROUTE_POLICY, or start `skyroute demo`"
        )
    return Path(chosen)
