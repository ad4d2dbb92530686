"""Thin wrapper over ``subprocess``: one simulated engine (``python -m simengine``)."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import dataclass

import httpx

__all__ = ["EngineCommand", "EngineProcess", "free_port"]

_HOST = "127.0.0.1"
_STOP_GRACE_S = 10.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, slots=True)
class EngineCommand:
    """How to start an engine: profile, served model and simulation settings."""

    profile: str
    model: str
    time_scale: float = 1.0
    seed: int = 0
    log_level: str = "WARNING"
    python: str | None = None

    def argv(self, port: int) -> list[str]:
        """The command line for an engine on ``port``."""
        return [
            self.python or sys.executable, "-m", "simengine",
            "--host", _HOST,
            "--port", str(port),
            "--profile", self.profile,
            "--model", self.model,
            "--seed", str(self.seed),
            "--time-scale", str(self.time_scale),
            "--log-level", self.log_level,
        ]  # fmt: skip


class EngineProcess:
    """A started engine on a free 127.0.0.1 port. Raises OSError if it cannot start."""

    def __init__(self, command: EngineCommand) -> None:
        self.port = free_port()
        self._proc = subprocess.Popen(
            command.argv(self.port), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        )

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8123``."""
        return f"http://{_HOST}:{self.port}"

    def exit_code(self) -> int | None:
        """The exit code once the process has ended, else None."""
        return self._proc.poll()

    def healthy(self, http: httpx.Client) -> bool:
        """True if ``GET /health`` answers 200."""
        try:
            return http.get(f"{self.url}/health").status_code == 200
        except httpx.HTTPError:
            return False

    def terminate(self) -> None:
        """Ask the engine to stop (SIGTERM); it finishes in-flight requests first."""
        if self._proc.poll() is None:
            self._proc.terminate()

    def stop(self) -> None:
        """Terminate and wait for the exit, killing the engine if it takes too long."""
        self.terminate()
        try:
            self._proc.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
