from __future__ import annotations

import numpy as np
import pytest

from autoscaler.config import ScalerConfig


@pytest.mark.parametrize(
    "bad",
    [
        {"headroom": 0.9},
        {"spot_cap": 1.5},
        {"max_step": 0},
        {"max_step_share": -0.1},
        {"budget_usd_per_hour": -1.0},
    ],
)
def test_a_nonsensical_knob_is_refused_when_the_config_is_made(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ScalerConfig(**bad)  # type: ignore[arg-type]


def test_the_step_grows_with_the_pool_when_a_share_is_set() -> None:
    config = ScalerConfig(max_step=4, max_step_share=0.25)
    assert config.step(np.asarray([0, 8, 40])).tolist() == [4, 4, 10]
