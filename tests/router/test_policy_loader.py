"""Policy loading: valid files parse; every problem is reported with its key path and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from base.errors import PolicyError, PolicyProblem
from live.policy_file import load_policy
from router.policy_loader import parse_policy

FIXTURE = Path(__file__).parent.parent / "fixtures" / "router_policy.yaml"


def _valid_text() -> str:
    return FIXTURE.read_text(encoding="utf-8")


def _mutate(old: str, new: str) -> tuple[str, int]:
    """Replace the one line ``old`` of the valid policy; return the text and that line (1-based)."""
    lines = _valid_text().splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.rstrip("\n") == old]
    assert len(hits) == 1, f"fixture must hold {old!r} exactly once"
    lines[hits[0]] = new + "\n"
    return "".join(lines), hits[0] + 1


def _line_of(text: str, exact: str) -> int:
    hits = [n for n, line in enumerate(text.splitlines(), start=1) if line == exact]
    assert len(hits) == 1
    return hits[0]


def _problems(text: str) -> list[PolicyProblem]:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "test.yaml")
    return info.value.problems


def _problem_at(problems: list[PolicyProblem], path: str) -> PolicyProblem:
    matching = [p for p in problems if p.path == path]
    assert matching, f"no problem at {path!r} in {problems}"
    return matching[0]


def test_valid_policy_file_parses_into_its_pools_models_and_regions() -> None:
    policy = load_policy(FIXTURE)

    assert [p.id for p in policy.pools] == [
        "aws:us-east-1:h100-llama70b",
        "gcp:us-central1:a100-llama70b",
        "local:lab:l4-llama8b",
    ]
    assert policy.pools[1].price.purchase == "spot"
    assert policy.pools[1].location == "gcp:us-central1"
    assert policy.models["llama-3.1-70b"].default_slo == "interactive"
    assert policy.slo_classes["batch"].ttft_ms == 30000
    assert policy.client_regions["eu-west"].rtt_ms == {"gcp:us-central1": 110}
    assert policy.routing.default_client_region == "us-east"


def test_negative_goodput_is_reported_at_its_key_path_and_line() -> None:
    text, line = _mutate("      tokens_per_s: 1800", "      tokens_per_s: -1800")

    problems = _problems(text)

    problem = _problem_at(problems, "pools[1].goodput.tokens_per_s")
    assert problem.line == line == 51
    assert "greater than 0" in problem.message


def test_unknown_default_slo_is_reported_at_the_models_default_slo_line() -> None:
    text, line = _mutate("    default_slo: interactive", "    default_slo: realtime")

    problem = _problem_at(_problems(text), "models.llama-3.1-70b.default_slo")

    assert problem.line == line
    assert "unknown SLO class 'realtime'" in problem.message


def test_pool_with_unknown_model_is_reported_at_its_model_line() -> None:
    text, line = _mutate("    model: llama-3.1-8b", "    model: mistral-7b")

    problem = _problem_at(_problems(text), "pools[2].model")

    assert problem.line == line
    assert "unknown model 'mistral-7b'" in problem.message


def test_duplicate_pool_id_is_reported_at_the_second_pools_id_line() -> None:
    text, line = _mutate(
        "  - id: gcp:us-central1:a100-llama70b", "  - id: aws:us-east-1:h100-llama70b"
    )

    problems = _problems(text)

    problem = _problem_at(problems, "pools[1].id")
    assert problem.line == line
    assert "duplicate pool id 'aws:us-east-1:h100-llama70b'" in problem.message
    assert not [p for p in problems if p.path == "pools[0].id"]


def test_unknown_default_client_region_is_reported_at_its_line() -> None:
    text, line = _mutate("  default_client_region: us-east", "  default_client_region: mars")

    problem = _problem_at(_problems(text), "routing.default_client_region")

    assert problem.line == line


def test_yaml_syntax_error_is_reported_with_its_line() -> None:
    text, line = _mutate("    gpu_type: H100", "    gpu_type: H100: oops")

    problems = _problems(text)

    assert len(problems) == 1
    assert problems[0].line == line
    assert problems[0].message.startswith("not valid YAML")


@pytest.mark.parametrize(
    ("old", "new", "path"),
    [
        ("version: 1", "verison: 1", "verison"),
        ("    gpu_type: H100", "    gpu_typ: H100", "pools[0].gpu_typ"),
        ("      tpot_ms: 25", "      tpot_msec: 25", "pools[2].goodput.tpot_msec"),
    ],
    ids=["top-level", "pool", "nested"],
)
def test_unknown_key_is_refused_at_its_line(old: str, new: str, path: str) -> None:
    text, line = _mutate(old, new)

    problem = _problem_at(_problems(text), path)

    assert problem.line == line
    assert "Extra inputs are not permitted" in problem.message


def test_missing_key_is_reported_at_the_line_of_its_parent() -> None:
    text = _valid_text().replace("    upstream_model: meta-llama/Llama-3.1-8B-Instruct\n", "", 1)

    problem = _problem_at(_problems(text), "pools[2].upstream_model")

    assert problem.line == _line_of(text, "  - id: local:lab:l4-llama8b")
    assert problem.message == "Field required"


def test_cross_field_check_inside_a_pool_is_reported_at_that_blocks_line() -> None:
    text, _ = _mutate("      initial: 2", "      initial: 9")

    problem = _problem_at(_problems(text), "pools[0].replicas")

    assert problem.line == _line_of(text, "    replicas:")
    assert "min <= initial <= max" in problem.message


def test_every_problem_in_a_file_is_reported_not_only_the_first() -> None:
    text, _ = _mutate("      tokens_per_s: 1800", "      tokens_per_s: -1800")
    text = text.replace("      max_concurrency: 16\n", "      max_concurrency: 0\n", 1)

    paths = {p.path for p in _problems(text)}

    assert {"pools[1].goodput.tokens_per_s", "pools[2].goodput.max_concurrency"} <= paths


def test_policy_that_is_not_a_mapping_is_refused() -> None:
    problems = _problems("- just\n- a list\n")

    assert problems == [PolicyProblem("", 1, "the policy must be a YAML mapping")]


def test_policy_error_message_names_the_source_line_and_path() -> None:
    text, line = _mutate("      tokens_per_s: 1800", "      tokens_per_s: -1800")

    with pytest.raises(PolicyError) as info:
        parse_policy(text, "prod.yaml")

    assert info.value.source == "prod.yaml"
    assert f"line {line}: pools[1].goodput.tokens_per_s" in str(info.value)


def test_load_policy_on_a_missing_file_raises_policy_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"

    with pytest.raises(PolicyError) as info:
        load_policy(missing)

    assert info.value.source == str(missing)
    assert len(info.value.problems) == 1
    assert info.value.problems[0].message.startswith("cannot read")


def test_load_policy_reports_problems_with_the_file_as_source(tmp_path: Path) -> None:
    text, line = _mutate("    default_slo: interactive", "    default_slo: realtime")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text, encoding="utf-8")

    with pytest.raises(PolicyError) as info:
        load_policy(bad)

    assert info.value.source == str(bad)
    assert _problem_at(info.value.problems, "models.llama-3.1-70b.default_slo").line == line


def test_a_key_given_twice_is_refused_at_its_second_line() -> None:
    text, line = _mutate(
        "    default_slo: interactive", "    default_slo: interactive\n    default_slo: batch"
    )

    problem = _problem_at(_problems(text), "models.llama-3.1-70b.default_slo")

    assert problem.line == line + 1
    assert "duplicate key 'default_slo'" in problem.message


def test_broken_references_are_reported_with_field_errors_in_one_run() -> None:
    text, _ = _mutate("      tokens_per_s: 1800", "      tokens_per_s: -1800")
    text = text.replace("    model: llama-3.1-8b\n", "    model: mistral-7b\n", 1)

    paths = {p.path for p in _problems(text)}

    assert {"pools[1].goodput.tokens_per_s", "pools[2].model"} <= paths
