"""``python -m simengine``: argument parsing and a real process lifecycle."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from base.ports import reserve_port
from simengine.__main__ import parse_args


def test_parse_args_reads_engine_options() -> None:
    args = parse_args(
        ["--port", "9001", "--profile", "l4-llama-3.1-8b", "--model", "m", "--time-scale", "0"]
    )
    assert (args.port, args.profile, args.model, args.seed, args.time_scale) == (
        9001,
        "l4-llama-3.1-8b",
        "m",
        0,
        0.0,
    )


def test_parse_args_rejects_unknown_profile(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--profile", "nope", "--model", "m"])
    assert "h100-llama-3.1-8b" in capsys.readouterr().err


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status, resp.headers["x-sim-engine"]


def test_module_serves_until_sigterm_then_exits_cleanly() -> None:
    # On a socket reserved for it (the way the demo and the local cloud start engines):
    # the port is never free between choosing it and the engine listening.
    with reserve_port() as sock:
        port = int(sock.getsockname()[1])
        cmd = [sys.executable, "-m", "simengine", "--fd", str(sock.fileno())]
        cmd += ["--profile", "a10g-llama-3.1-8b", "--model", "m", "--time-scale", "0"]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(sock.fileno(),)
        )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                assert _get(f"http://127.0.0.1:{port}/health") == (200, "a10g-llama-3.1-8b")
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None and time.monotonic() < deadline, "engine did not start"
                time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr.decode()
    assert b"stopped" in stderr


def test_a_reserved_port_cannot_be_taken_until_it_is_released() -> None:
    with reserve_port() as held:
        port = int(held.getsockname()[1])
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))
        assert held.get_inheritable()
