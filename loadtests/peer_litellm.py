"""The LiteLLM proxy as a benchmark peer: installed from PyPI into its own virtualenv and
configured with one simulated engine as an ``openai/`` deployment.

Telemetry is off and there is no database (no ``database_url``, ``DATABASE_URL`` removed from
the environment), so the proxy does what a stateless gateway does: authenticate a master key,
map the model name and forward. Settings follow LiteLLM's proxy documentation (config.yaml
``model_list`` / ``litellm_settings`` / ``general_settings``; ``litellm --config --port
--num_workers``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml

# The newest release whose pinned requirements resolve against the package index these
# machines use (1.103 and later pin a certifi that is not there).
LITELLM_VERSION = "1.102.4"


def ensure_litellm(venv: Path, version: str) -> Path:
    """A virtualenv at ``venv`` with ``litellm[proxy]==version``; returns its ``litellm``.

    Idempotent: an existing venv with that version is reused. Raises CalledProcessError.
    """
    exe, py = venv / "bin" / "litellm", venv / "bin" / "python"
    check = [str(py), "-c", "import importlib.metadata as m; print(m.version('litellm'))"]
    if exe.exists():
        found = subprocess.run(check, capture_output=True, text=True, check=False).stdout.strip()
        if found == version:
            return exe
    started = time.monotonic()
    print(f"installing litellm[proxy]=={version} into {venv} ...", flush=True)
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, f"litellm[proxy]=={version}"], check=True)
    print(f"  installed in {time.monotonic() - started:.0f} s", flush=True)
    return exe


def write_litellm_config(
    path: Path,
    engine_url: str,
    master_key: str,
    model: str,
    upstream_model: str,
    timeout_s: float,
) -> None:
    """The LiteLLM proxy config: the engine (serving ``upstream_model``) as one ``openai/``
    deployment of ``model``; ``timeout_s`` is LiteLLM's request timeout.

    No database_url (so no Postgres, no spend logs), telemetry off, no callbacks; the master
    key is the one credential, as skyroute's client key is.
    """
    config = {
        "model_list": [
            {
                "model_name": model,
                "litellm_params": {
                    "model": f"openai/{upstream_model}",
                    "api_base": f"{engine_url}/v1",
                    "api_key": "sk-engine-needs-none",
                },
            }
        ],
        "litellm_settings": {
            "telemetry": False,
            "drop_params": True,
            "set_verbose": False,
            "request_timeout": timeout_s,
        },
        "general_settings": {"master_key": master_key},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def litellm_env(base: dict[str, str]) -> dict[str, str]:
    """Environment of the LiteLLM proxy: telemetry off, no database, no network look-ups."""
    env = {k: v for k, v in base.items() if k not in {"DATABASE_URL", "DIRECT_URL"}}
    env |= {
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # use the packaged price map, fetch nothing
        "LITELLM_MODE": "PRODUCTION",  # do not read a .env file from the working directory
        "LITELLM_LOG": "ERROR",
        "DISABLE_ADMIN_UI": "True",
        "NO_DOCS": "True",
    }
    return env
