"""redis imported without its OTel metrics: nothing hidden for good, redis still works.

Each case runs in a fresh interpreter: in this one redis and OpenTelemetry are long
imported by other tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHECK = textwrap.dedent(
    """
    import json, sys
    from skyroute.redis_import import OPTIONAL_FOR_REDIS, import_redis
    import_redis()
    out = {"redis": "redis.asyncio" in sys.modules,
           "loaded_during": [m for m in OPTIONAL_FOR_REDIS if m in sys.modules],
           "finders": [type(f).__name__ for f in sys.meta_path]}
    import redis.observability.providers as providers
    out["redis_sees_otel"] = providers.OTEL_AVAILABLE
    import opentelemetry.sdk.metrics  # importable by anyone after redis
    from gateway.tracing import Tracing
    out["tracing"] = Tracing.from_env({"OTEL_TRACES_EXPORTER": "console"}).enabled
    import redis
    client = redis.Redis.from_url(sys.argv[1])
    out["ping"] = client.ping()
    client.close()
    print(json.dumps(out))
    """
)


def _run(code: str, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_redis_loads_without_the_otel_metrics_and_they_stay_importable(redis_url: str) -> None:
    out = _run(_CHECK, redis_url)
    assert out["redis"] is True
    assert out["loaded_during"] == []
    finders = out["finders"]
    assert isinstance(finders, list) and "_Hidden" not in finders  # removed once redis is in
    assert out["redis_sees_otel"] is False
    assert out["tracing"] is True
    assert out["ping"] is True


def test_nothing_is_hidden_once_redis_or_the_metrics_are_loaded() -> None:
    code = textwrap.dedent(
        """
        import json, sys
        import opentelemetry.metrics
        from skyroute.redis_import import import_redis
        import_redis()
        import redis.observability.providers as providers
        print(json.dumps({"redis_sees_otel": providers.OTEL_AVAILABLE}))
        """
    )
    assert _run(code) == {"redis_sees_otel": True}
