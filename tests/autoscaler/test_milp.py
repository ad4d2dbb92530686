"""The mix program on its own: the spot cap against firm demand and margin."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autoscaler.milp import MixProblem, solve_mix


def _problem(demand: float, firm: float | None) -> MixProblem:
    # One line, a spot pool at 0.3 $/h and an on-demand one at 1 $/h, 1000 tokens/s each.
    return MixProblem(
        cost=np.asarray([0.3, 1.0]),
        goodput=np.asarray([1000.0, 1000.0]),
        lower=np.zeros(2, dtype=np.intp),
        upper=np.full(2, 20, dtype=np.intp),
        current=np.zeros(2, dtype=np.intp),
        spot=np.asarray([True, False]),
        pool_model=np.zeros(2, dtype=np.intp),
        demand=np.asarray([demand]),
        line_model=np.zeros(1, dtype=np.intp),
        feasible=np.ones((2, 1), dtype=np.bool_),
        spot_cap=0.5,
        firm=None if firm is None else np.asarray([firm]),
    )


def test_without_firm_demand_the_cap_holds_for_all_of_it() -> None:
    solution = solve_mix(_problem(6000.0, None))
    assert solution is not None
    assert list(solution.replicas) == [3, 3]


def test_the_margin_above_firm_demand_goes_to_the_cheapest_pool() -> None:
    # 4000 expected, 6000 to cover: on demand carries half the 4000, spot the rest.
    solution = solve_mix(_problem(6000.0, 4000.0))
    assert solution is not None
    assert list(solution.replicas) == [4, 2]
    assert float(solution.shortfall.sum()) == 0.0


def test_firm_demand_above_the_demand_counts_as_the_demand() -> None:
    solution = solve_mix(_problem(6000.0, 9000.0))
    assert solution is not None
    assert list(solution.replicas) == [3, 3]


def test_a_line_that_loads_a_pool_more_needs_more_of_its_replicas() -> None:
    # 5000 tokens/s on the on-demand pool alone; each token costs 1.1 tokens of its goodput.
    base = _problem(5000.0, None)
    one_pool = replace(base, spot=np.zeros(2, dtype=np.bool_), upper=np.asarray([0, 20]))
    plain = solve_mix(one_pool)
    loaded = solve_mix(replace(one_pool, load=np.full((2, 1), 1.1)))
    assert plain is not None and loaded is not None
    assert list(plain.replicas) == [0, 5]
    assert list(loaded.replicas) == [0, 6]
    assert float(loaded.assigned.sum()) >= 5000.0 - 1e-6


def test_a_pool_that_prefills_only_part_of_a_line_in_time_carries_only_that_part() -> None:
    # The spot pool meets the TTFT for 60 % of the requests (the shorter prompts): the
    # other 40 % of 5000 tokens/s must go to the on-demand pool.
    base = replace(_problem(5000.0, None), spot_cap=1.0)
    free = solve_mix(base)
    capped = solve_mix(replace(base, in_time=np.asarray([[0.6], [1.0]])))
    assert free is not None and capped is not None
    assert list(free.replicas) == [5, 0]
    assert list(capped.replicas) == [3, 2]
    assert float(capped.assigned[0, 0]) <= 3000.0 + 1e-6


def test_pools_slower_than_another_share_its_cap() -> None:
    # Two slow pools at 50 % and 60 %: together they still take at most 60 %.
    problem = MixProblem(
        cost=np.asarray([0.1, 0.1, 1.0]),
        goodput=np.full(3, 1000.0),
        lower=np.zeros(3, dtype=np.intp),
        upper=np.full(3, 20, dtype=np.intp),
        current=np.zeros(3, dtype=np.intp),
        spot=np.zeros(3, dtype=np.bool_),
        pool_model=np.zeros(3, dtype=np.intp),
        demand=np.asarray([10_000.0]),
        line_model=np.zeros(1, dtype=np.intp),
        feasible=np.ones((3, 1), dtype=np.bool_),
        in_time=np.asarray([[0.5], [0.6], [1.0]]),
    )
    solution = solve_mix(problem)
    assert solution is not None
    assert float(solution.assigned[:2, 0].sum()) <= 6000.0 + 1e-6
    assert int(solution.replicas[2]) == 4


def test_a_line_no_pool_serves_in_full_still_gets_all_its_capacity() -> None:
    # Both pools meet the TTFT for 70 % only: the rest is served late but served.
    base = replace(_problem(5000.0, None), spot_cap=1.0)
    solution = solve_mix(replace(base, in_time=np.asarray([[0.7], [0.7]])))
    assert solution is not None
    assert list(solution.replicas) == [5, 0]
