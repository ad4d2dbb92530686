"""The command line finds its gateway through the environment or the context file, and
every failure is one line that says what to do (no traceback)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from base.errors import CommandError
from skyroute import context
from skyroute.embedded_redis import free_port

ROOT = Path(__file__).resolve().parents[2]


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYROUTE_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    env.update(extra)
    return env


def _skyroute(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from skyroute.cli import main; main()", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_write_context_keeps_the_credential_in_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKYROUTE_CONTEXT", str(tmp_path / "ctx" / "context.json"))
    for name in ("SKYROUTE_ADMIN_TOKEN", "SKYROUTE_ADMIN_URL", "SKYROUTE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    ctx = context.Context(url="http://127.0.0.1:1234/", redis_url="redis://127.0.0.1:1/0")

    path = context.write_context(ctx, admin_token="sk-adm-secret")

    saved = json.loads(path.read_text())
    assert "sk-adm-secret" not in path.read_text()
    token_file = Path(saved["admin_token_file"])
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert context.admin_token() == "sk-adm-secret"
    assert context.gateway_url() == "http://127.0.0.1:1234"
    assert context.redis_target() == ("redis://127.0.0.1:1/0", None)
    monkeypatch.setenv("SKYROUTE_ADMIN_URL", "http://127.0.0.1:99")
    assert context.gateway_url() == "http://127.0.0.1:99"  # the environment wins


def test_a_broken_context_file_is_an_error_not_a_silent_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "context.json"
    broken.write_text("{not json")
    monkeypatch.setenv("SKYROUTE_CONTEXT", str(broken))
    monkeypatch.delenv("SKYROUTE_ADMIN_URL", raising=False)
    with pytest.raises(CommandError, match="cannot read the context file"):
        context.gateway_url()


@pytest.mark.parametrize("command", [["pools"], ["keys", "list", "--tenant", "t"], ["tenants"]])
def test_without_a_context_admin_commands_say_how_to_get_one(
    tmp_path: Path, command: list[str]
) -> None:
    result = _skyroute(_clean_env(tmp_path), *command)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1
    assert "no admin credential" in result.stderr and "skyroute demo" in result.stderr


def test_an_unreachable_gateway_is_one_line(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    ctx_file = tmp_path / "context.json"
    env = _clean_env(tmp_path, SKYROUTE_CONTEXT=str(ctx_file))
    ctx = context.Context(url=f"http://127.0.0.1:{port}")
    (tmp_path / "tok").write_text("sk-adm-x\n")
    ctx_file.write_text(json.dumps({**ctx.__dict__, "admin_token_file": str(tmp_path / "tok")}))

    result = _skyroute(env, "pools")

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"cannot reach the gateway at http://127.0.0.1:{port}" in result.stderr


def test_explain_without_a_policy_names_the_three_ways_to_give_one(tmp_path: Path) -> None:
    result = _skyroute(_clean_env(tmp_path), "explain", "--model", "m", "--prompt-tokens", "9")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "--policy FILE" in result.stderr and "SKYROUTE_POLICY" in result.stderr


def test_help_lists_every_subcommand_without_importing_them(tmp_path: Path) -> None:
    probe = (
        "import sys\nfrom skyroute.cli import COMMANDS, build_parser\n"
        "text = build_parser(None).format_help()\n"
        "missing = [c for c in COMMANDS if c not in text]\n"
        "heavy = [m for m in ('gateway', 'simulator', 'autoscaler', 'pricing', 'numpy')"
        " if m in sys.modules]\n"
        "print(missing, heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=_clean_env(tmp_path),
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert out.strip() == "[] []"
