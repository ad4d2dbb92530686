"""A stopped gateway exits even when a library thread would keep it alive
(``skyroute.serve.exit_past_stray_threads``): run in a child process, bounded in time."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import threading
from skyroute.serve import exit_past_stray_threads

forever = threading.Event()
threading.Thread(target=forever.wait, name="stuck-connection").start()
exit_past_stray_threads(7, grace_s=0.2)
print("not reached")
"""

CLEAN = """
import threading
from skyroute.serve import exit_past_stray_threads

threading.Thread(target=lambda: None, name="done-soon").start()
exit_past_stray_threads(7, grace_s=5.0)
print("returned")
"""


def test_a_thread_that_never_ends_does_not_keep_the_process_alive() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 7, proc.stderr
    assert "not reached" not in proc.stdout
    assert "stuck-connection" in proc.stderr


def test_threads_that_end_in_time_let_the_caller_return() -> None:
    proc = subprocess.run([sys.executable, "-c", CLEAN], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "returned"
