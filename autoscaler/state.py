"""What the autoscaler remembers between cycles, stored in Redis as JSON (never pickled).

Everything that must survive a restart or a change of leader lives here: recent
recommendations (for scale-down stabilisation), when each pool last grew (cooldown),
the goodput correction factors, pools that are out of capacity or over quota, providers
that throttled us, pools whose bad instances are being replaced, and how well each
demand line's upper quantile has covered what happened.
"""

from __future__ import annotations

import logging

from pydantic import BaseModel, ConfigDict, ValidationError

from autoscaler.calibrate import LineCalibration

__all__ = ["ScalerState"]

logger = logging.getLogger(__name__)


class ScalerState(BaseModel):
    """Immutable; ``decide()`` and the actuator return updated copies.

    Times are unix seconds. ``recommendations[pool]`` holds (time, replicas) pairs
    within the stabilisation window and ``asked[line]`` (time, tokens/s) the demand
    each of them was solved for, per demand line (``demand.line_key``).
    ``blocked_until_s[pool]`` forbids growing a pool
    (stockout or quota) until then, ``throttled_until_s[provider]`` forbids calling a
    provider. ``replacing[pool]`` lists node ids being replaced. ``holder`` and
    ``token`` record the leader (and its fencing token) that wrote the state.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    version: int = 1
    updated_s: float = 0.0
    holder: str = ""
    token: int = 0
    cycles: int = 0
    recommendations: dict[str, list[tuple[float, int]]] = {}
    asked: dict[str, list[tuple[float, float]]] = {}
    last_up_s: dict[str, float] = {}
    last_down_s: dict[str, float] = {}
    corrections: dict[str, float] = {}
    blocked_until_s: dict[str, float] = {}
    blocked_reason: dict[str, str] = {}
    throttled_until_s: dict[str, float] = {}
    replacing: dict[str, list[str]] = {}
    calibration: dict[str, LineCalibration] = {}

    def to_json(self) -> str:
        """The JSON text that is stored."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | None) -> ScalerState:
        """Parse stored JSON; a missing or unreadable state starts afresh (logged)."""
        if not text:
            return cls()
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            logger.warning("autoscaler state unreadable, starting afresh: %s", exc)
            return cls()

    def blocked(self, pool_id: str, now_s: float) -> bool:
        """Whether ``pool_id`` may not grow at ``now_s``."""
        return self.blocked_until_s.get(pool_id, 0.0) > now_s
