"""Read the routing policy file: the I/O half of :mod:`router.policy_loader`."""

from __future__ import annotations

from pathlib import Path

from base.errors import PolicyError, PolicyProblem
from router.policy import Policy
from router.policy_loader import parse_policy


def load_policy(path: str | Path) -> Policy:
    """Read and validate the policy file at ``path``.

    Raises PolicyError if the file cannot be read or is invalid; never returns a
    partially valid policy.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(str(p), [PolicyProblem("", 0, f"cannot read: {exc.strerror}")]) from exc
    return parse_policy(text, str(p))
