"""Type aliases shared across skyroute."""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import numpy.typing as npt

PoolId: TypeAlias = str
FloatArray: TypeAlias = npt.NDArray[np.float64]
IntArray: TypeAlias = npt.NDArray[np.intp]
BoolArray: TypeAlias = npt.NDArray[np.bool_]
