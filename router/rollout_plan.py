"""A rollout plan: how a new version of a model earns its traffic (YAML, validated here).

    validation:                     # golden requests before any user traffic
      golden: golden.yaml           # prompts with checks (see the validation gate)
      max_failures: 0
    shadow:                         # mirrored live traffic; clients only see stable
      share: 0.05
      min_requests: 200
      min_duration_s: 60
    steps:                          # canary shares of the traffic the version could serve
      - {share: 0.01, min_requests: 300, min_duration_s: 60, max_duration_s: 1800}
      - {share: 0.10, min_requests: 1000, min_duration_s: 300}
      - {share: 0.50, min_requests: 3000, min_duration_s: 600}
    sticky: session                 # none | session | tenant
    judgement:
      alpha: 0.05                   # false-alarm bound over the whole rollout
      max_exposed_requests: 5000    # a bad version touches at most this many requests
      on_inconclusive: rollback     # at a step's max_duration_s: rollback | hold
      metrics:
        - {name: error_rate, allowed: 0.005}
        - {name: slo_miss_rate, allowed: 0.01}
        - {name: ttft_over_reference, allowed: 0.05}
        - {name: tpot_over_reference, allowed: 0.05}
        - {name: output_under_reference, allowed: 0.05}

Every metric is a per-request bad-event rate (``router.judge``); ``allowed`` is the
largest tolerated increase of that rate over the stable version's. The ``*_reference``
metrics count answers past the stable version's own quantile in the same stage (TTFT or
TPOT above its ``reference_quantile``, output shorter than its ``1 - reference_quantile``;
``router.rollout_tally``). Shares are fractions.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MetricName = Literal[
    "error_rate",
    "slo_miss_rate",
    "ttft_over_reference",
    "tpot_over_reference",
    "output_under_reference",
    "answer_mismatch_rate",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GoldenChecks(_Strict):
    """What a golden answer must satisfy: its message content parses as JSON
    (``valid_json``), contains every string of ``contains``, and came within
    ``max_latency_ms`` (the whole non-streaming answer)."""

    valid_json: bool = False
    contains: list[str] = Field(default_factory=list)
    max_latency_ms: float | None = Field(default=None, gt=0)


class GoldenRequest(_Strict):
    """One golden request: a chat conversation and the checks on its answer."""

    name: str = ""
    messages: list[dict[str, str]] = Field(min_length=1)
    max_tokens: int = Field(default=64, gt=0, le=8192)
    checks: GoldenChecks = GoldenChecks()


class ValidationGate(_Strict):
    """Golden requests sent to the new version's pools before any user traffic.

    ``golden`` names the file (YAML list of ``GoldenRequest``, relative to the plan's
    file); ``skyroute rollout start`` reads it into ``requests``, so whichever sidecar
    leads can run them. A gate with no requests fails (nothing was validated)."""

    golden: str = ""
    requests: list[GoldenRequest] = Field(default_factory=list)
    max_failures: int = Field(default=0, ge=0)


class ShadowStage(_Strict):
    """A share of live requests mirrored to the new version (never billed, never shown).

    ``similarity``: when set, each mirrored non-streaming answer is compared with the
    stable version's answer to the same request: word sets whose Jaccard similarity is
    below it count as a mismatch (metric ``answer_mismatch_rate``)."""

    share: float = Field(gt=0, le=1)
    similarity: float | None = Field(default=None, gt=0, le=1)
    min_requests: int = Field(default=200, ge=1)
    min_duration_s: float = Field(default=60.0, ge=0)
    max_duration_s: float = Field(default=3600.0, gt=0)


class CanaryStep(_Strict):
    """One step: the new version takes ``share`` of the traffic it could serve until the
    step has ``min_requests`` judged canary requests and ``min_duration_s`` have passed.
    A share is below 1: the stable version must keep traffic to be compared with (the
    last step passed, the new version is promoted to all of it)."""

    share: float = Field(gt=0, lt=1)
    min_requests: int = Field(default=300, ge=1)
    min_duration_s: float = Field(default=60.0, ge=0)
    max_duration_s: float = Field(default=3600.0, gt=0)

    @model_validator(mode="after")
    def _durations(self) -> CanaryStep:
        if self.max_duration_s < self.min_duration_s:
            raise ValueError("max_duration_s must be at least min_duration_s")
        return self


class MetricRule(_Strict):
    """A judged metric and its tolerated increase (a rate difference, 0..1)."""

    name: MetricName
    allowed: float = Field(ge=0, lt=1)


class Judgement(_Strict):
    """How canary and stable are compared, and what bounds a bad version's reach."""

    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    max_exposed_requests: int = Field(default=5000, ge=1)
    on_inconclusive: Literal["rollback", "hold"] = "rollback"
    # Reference quantile of the stable version's TTFT/TPOT for the *_over_reference rules.
    reference_quantile: float = Field(default=0.9, gt=0, lt=1)
    metrics: list[MetricRule] = Field(
        default_factory=lambda: [
            MetricRule(name="error_rate", allowed=0.005),
            MetricRule(name="slo_miss_rate", allowed=0.01),
        ],
        min_length=1,
    )

    @model_validator(mode="after")
    def _unique(self) -> Judgement:
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise ValueError(f"a metric is judged twice: {names}")
        return self


class RolloutPlan(_Strict):
    """The whole plan. At least one canary step; shares must not decrease."""

    validation: ValidationGate | None = None
    shadow: ShadowStage | None = None
    steps: list[CanaryStep] = Field(min_length=1)
    sticky: Literal["none", "session", "tenant"] = "none"
    judgement: Judgement = Judgement()

    @model_validator(mode="after")
    def _increasing(self) -> RolloutPlan:
        shares = [s.share for s in self.steps]
        if shares != sorted(shares):
            raise ValueError(f"canary shares must not decrease: {shares}")
        return self


# The plan a rollout gets when its operator gives none: no gate (there is no golden file
# to read), a short shadow stage, then 1 %, 10 % and 50 % of the traffic the new version
# could serve. The first step bounds what an unknown version touches: a regression large
# enough to matter is decided there (loadtests/bench_rollout.py). Judged by default: what
# the version itself decides, errors, decode speed (TPOT against the stable version's
# 90th percentile in the same window, both as a share of what their pools' profiles
# expect at their load) and answer length. Not TTFT or SLO misses: those are dominated
# by queueing, which depends on how the new version's pools are sized for their share
# (a 1 % share runs on a pool a fraction of the stable one's size, and a small pool
# queues more at the same load); a plan may add them where the pools are sized alike.
DEFAULT_PLAN = RolloutPlan.model_validate(
    {
        "shadow": {"share": 0.05, "min_requests": 200, "min_duration_s": 60},
        "steps": [
            {"share": 0.01, "min_requests": 200, "min_duration_s": 60, "max_duration_s": 3600},
            {"share": 0.10, "min_requests": 500, "min_duration_s": 120},
            {"share": 0.50, "min_requests": 1000, "min_duration_s": 300},
        ],
        "sticky": "session",
        "judgement": {
            "metrics": [
                {"name": "error_rate", "allowed": 0.005},
                {"name": "tpot_over_reference", "allowed": 0.05},
                {"name": "output_under_reference", "allowed": 0.05},
            ]
        },
    }
)
