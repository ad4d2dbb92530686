"""Fault-injection settings of the simulated engine (``/sim/faults``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class FaultConfig:
    """Faults applied to every inference request (chat, completions, embeddings).

    Attributes:
        fail_rate: probability in [0, 1] that a request is rejected before admission.
        fail_status: HTTP status of such a rejection (400-599).
        slowdown: factor (> 0) multiplying TPOT, to emulate a degraded replica.
        stream_error_after: if set, a stream sends an SSE error event after this many chunks
            and closes without ``[DONE]``.
        hang: if true, requests are accepted but never answered until hang is turned off.
    """

    fail_rate: float = 0.0
    fail_status: int = 503
    slowdown: float = 1.0
    stream_error_after: int | None = None
    hang: bool = False

    @classmethod
    def from_json(cls, data: object) -> FaultConfig:
        """Build a config from a decoded JSON object; absent fields take their defaults.

        Raises:
            ValueError: if ``data`` is not an object, has unknown keys or out-of-range values.
        """
        if not isinstance(data, dict):
            raise ValueError("fault config must be a JSON object")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown fault fields: {sorted(unknown)}")
        fail_rate = _number(data, "fail_rate", 0.0)
        fail_status = data.get("fail_status", 503)
        slowdown = _number(data, "slowdown", 1.0)
        after = data.get("stream_error_after")
        hang = data.get("hang", False)
        if not 0.0 <= fail_rate <= 1.0:
            raise ValueError("fail_rate must be within [0, 1]")
        if not _is_int(fail_status) or not 400 <= fail_status <= 599:
            raise ValueError("fail_status must be an integer HTTP error status (400-599)")
        if slowdown <= 0.0:
            raise ValueError("slowdown must be > 0")
        if after is not None and (not _is_int(after) or after < 0):
            raise ValueError("stream_error_after must be null or an integer >= 0")
        if not isinstance(hang, bool):
            raise ValueError("hang must be a boolean")
        return cls(fail_rate, fail_status, slowdown, after, hang)

    def to_json(self) -> dict[str, Any]:
        """The config as a JSON-ready object, the shape ``from_json`` accepts."""
        return asdict(self)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(data: dict[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number")
    return float(value)
