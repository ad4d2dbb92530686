"""Looking node groups up by provider name, from policy pools."""

from __future__ import annotations

import subprocess
import sys

import pytest

from adapters.cloud import CloudConfig, NodeGroupSpec, create, node_group_for, provider_names
from adapters.cloud.fake import FakeCloud, FakeNodeGroup
from adapters.cloud.managed import ManagedNodeGroup
from adapters.cloud.registry import register
from base.errors import AdapterError
from router.policy import PoolSpec


def _pool(provider: str = "aws", scaling: dict[str, object] | None = None) -> PoolSpec:
    return PoolSpec.model_validate(
        {
            "id": f"{provider}:us-east-1:h100-llama70b",
            "provider": provider,
            "region": "us-east-1",
            "model": "llama-3.1-70b",
            "upstream_model": "meta-llama/Llama-3.1-70B-Instruct",
            "gpu_type": "H100",
            "gpus_per_replica": 8,
            "endpoints": ["http://127.0.0.1:9101"],
            "price": {"usd_per_gpu_hour": 6.88},
            "goodput": {"tokens_per_s": 5689, "prefill_tokens_per_s": 20000,
                        "max_concurrency": 256, "tpot_ms": 14},
            "replicas": {"min": 1, "max": 6, "initial": 1},
            "scaling": scaling,
        }
    )  # fmt: skip


def test_a_pools_spec_takes_group_and_bounds_from_the_policy() -> None:
    spec = NodeGroupSpec.from_pool(_pool(scaling={"group": "asg-h100"}))
    assert (spec.provider, spec.group, spec.min_size, spec.max_size) == ("aws", "asg-h100", 1, 6)


def test_node_group_for_uses_the_adapter_configured_for_the_pools_provider() -> None:
    config = CloudConfig(fake=FakeCloud(), adapter_for={"aws": "fake"})
    group = node_group_for(_pool(scaling={"group": "asg-h100"}), config)
    assert isinstance(group, FakeNodeGroup) and group.id == "aws:us-east-1:h100-llama70b"


def test_a_cloud_pool_without_a_scaling_section_is_refused() -> None:
    with pytest.raises(AdapterError, match="no scaling section"):
        node_group_for(_pool(), CloudConfig(adapter_for={"aws": "fake"}))


def test_a_local_pool_without_a_scaling_section_is_labelled_by_its_id() -> None:
    assert NodeGroupSpec.from_pool(_pool("local")).group == "local:us-east-1:h100-llama70b"


def test_an_unknown_provider_is_an_adapter_error_naming_the_known_ones() -> None:
    spec = NodeGroupSpec("x", "oracle", "r", "g")
    with pytest.raises(AdapterError, match="aws, azure, fake, gcp, local"):
        create(spec, CloudConfig())


def test_every_builtin_provider_is_known() -> None:
    assert {"aws", "gcp", "azure", "local", "fake"} <= set(provider_names())


def test_a_provider_name_cannot_be_taken_twice() -> None:
    with pytest.raises(ValueError, match="already registered"):

        class Impostor(ManagedNodeGroup, provider="fake"):
            pass


def test_registering_the_same_class_again_is_allowed() -> None:
    register("fake", FakeNodeGroup)  # a module reload does this: no error, nothing changes
    group = create(NodeGroupSpec.from_pool(_pool(scaling={"group": "g"})),
                   CloudConfig(fake=FakeCloud(), adapter_for={"aws": "fake"}))  # fmt: skip
    assert type(group) is FakeNodeGroup


def test_importing_the_package_loads_no_cloud_sdk() -> None:
    code = (
        "import sys, adapters.cloud; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'boto3', 'botocore', 'google', 'azure'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
