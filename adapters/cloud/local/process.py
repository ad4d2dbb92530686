"""Thin wrapper over ``subprocess``: one simulated engine (``python -m simengine``)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import httpx

from base.ports import reserve_port

__all__ = ["EngineCommand", "EngineProcess"]

_HOST = "127.0.0.1"
_STOP_GRACE_S = 10.0


@dataclass(frozen=True, slots=True)
class EngineCommand:
    """How to start an engine: profile, served model and simulation settings."""

    profile: str
    model: str
    time_scale: float = 1.0
    seed: int = 0
    log_level: str = "WARNING"
    python: str | None = None

    def argv(self, fd: int) -> list[str]:
        """The command line for an engine listening on the inherited bound socket ``fd``."""
        return [
            self.python or sys.executable, "-m", "simengine",
            "--fd", str(fd),
            "--profile", self.profile,
            "--model", self.model,
            "--seed", str(self.seed),
            "--time-scale", str(self.time_scale),
            "--log-level", self.log_level,
        ]  # fmt: skip


class EngineProcess:
    """A started engine on a free 127.0.0.1 port, reserved for it before it starts (no
    other process can take the port in between; ``base.ports``). Raises OSError if it
    cannot start."""

    def __init__(self, command: EngineCommand) -> None:
        with reserve_port(_HOST) as sock:
            self.port = int(sock.getsockname()[1])
            fd = sock.fileno()
            self._proc = subprocess.Popen(
                command.argv(fd),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(fd,),
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
