"""The autoscaler: forecast demand, plan the cheapest GPU mix that meets it, resize pools.

Deciding is apart from acting: ``autoscaler.decide.decide`` is pure (history, pools,
prices, policy, state -> :class:`Plan`); :class:`Actuator` applies a plan through
``adapters.cloud``; :class:`Sidecar` runs both every interval, acting only while it
leads. (``decide`` is not re-exported here, so that ``autoscaler.decide`` stays the
module.)
"""

from autoscaler.actuate import Actuator
from autoscaler.config import ScalerConfig
from autoscaler.demand import DemandHistory, LineForecast, forecast_lines
from autoscaler.drain import Drainer, DrainResult
from autoscaler.fleet import AUTOSCALER_REASON, PoolStatus
from autoscaler.forecast import Forecast, ForecastConfig, forecast_rate
from autoscaler.goodput import (
    GoodputObservation,
    goodput_tokens_per_s,
    observed_correction,
    update_correction,
)
from autoscaler.leader import Leadership, LeaseLike
from autoscaler.milp import MixProblem, MixSolution, solve_mix
from autoscaler.plan import DemandLine, Plan, PoolChange
from autoscaler.profile import MeasuredProfile, measure_profile
from autoscaler.report import ActuationReport, ActuatorLimits, Outcome
from autoscaler.settings import AutoscalerSettings
from autoscaler.sidecar import CycleResult, Sidecar, SidecarOptions
from autoscaler.state import ScalerState

__all__ = [
    "AUTOSCALER_REASON",
    "ActuationReport",
    "Actuator",
    "ActuatorLimits",
    "AutoscalerSettings",
    "CycleResult",
    "DemandHistory",
    "DemandLine",
    "DrainResult",
    "Drainer",
    "Forecast",
    "ForecastConfig",
    "GoodputObservation",
    "Leadership",
    "LeaseLike",
    "LineForecast",
    "MeasuredProfile",
    "MixProblem",
    "MixSolution",
    "Outcome",
    "Plan",
    "PoolChange",
    "PoolStatus",
    "ScalerConfig",
    "ScalerState",
    "Sidecar",
    "SidecarOptions",
    "forecast_lines",
    "forecast_rate",
    "goodput_tokens_per_s",
    "measure_profile",
    "observed_correction",
    "solve_mix",
    "update_correction",
]
