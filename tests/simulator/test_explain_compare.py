"""``skyroute explain --compare``: what each baseline would pick for one request, judged
on the same snapshot as skyroute's ranking."""

from __future__ import annotations

from live.policy_file import load_policy
from router.compiled import compile_policy
from router.scoring import RouteRequest, rank
from router.snapshot import PoolRow, Snapshot
from skyroute.demo import demo_policy_path
from skyroute.explain import baseline_picks, render_compare

SPOT = "aws:eu-west-1:a100-llama70b-spot"
H100 = "aws:us-east-1:h100-llama70b"


def _picks(rows: dict[str, PoolRow]) -> dict[str, str]:
    policy = compile_policy(load_policy(demo_policy_path()))
    snapshot = Snapshot.build(policy, rows, taken_at_s=0.0)
    request = RouteRequest("llama-3.1-70b", 3000, None, "standard", "aws:us-east-1")
    return {
        name: pool for name, pool, _ in baseline_picks(rank(request, policy, snapshot), snapshot)
    }


def test_a_full_cheapest_pool_sends_the_free_slot_baseline_elsewhere_but_not_litellm() -> None:
    # The spot pool's one replica has all 256 slots busy and 40 waiting.
    picks = _picks({SPOT: PoolRow(ready_replicas=1.0, inflight=296.0)})
    assert picks["litellm-cost-cooldown"] == SPOT
    assert picks["cheapest-free-slot"] == H100
    assert picks["llm-d-weighted"] != SPOT
    assert set(picks) == {
        "skyroute", "cheapest-free-slot", "litellm-cost-cooldown", "llm-d-weighted",
        "least-latency-budget",
    }  # fmt: skip


def test_an_idle_fleet_sends_every_cost_aware_baseline_to_the_cheapest_pool() -> None:
    picks = _picks({})
    assert picks["skyroute"] == picks["cheapest-free-slot"] == SPOT
    assert picks["least-latency-budget"] == SPOT  # the only pool within 1.5x its price


def test_the_comparison_renders_one_line_per_policy() -> None:
    policy = compile_policy(load_policy(demo_policy_path()))
    snapshot = Snapshot.empty(policy)
    request = RouteRequest("llama-3.1-70b", 100, None, "standard", "aws:eu-west-1")
    text = render_compare(rank(request, policy, snapshot), snapshot)
    assert len(text.splitlines()) == 2 + 5
    assert "us-east-1" not in text  # EU clients may use EU pools only
