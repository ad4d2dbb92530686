"""Ports for child servers, held from the moment they are chosen.

Choosing a free port by binding port 0, closing the socket and telling a child process
to bind the number races with every other process on the machine: in the gap, another
server (a parallel test's, say) can take it, and the child dies with EADDRINUSE while
whatever answers on that port is taken for it. ``reserve_port`` closes the gap: the
socket stays bound, the child inherits it (``subprocess.Popen(..., pass_fds=(fd,))``)
and listens on it (``python -m simengine --fd N``), and the parent then closes its copy.
The port is never free in between.
"""

from __future__ import annotations

import socket

__all__ = ["reserve_port"]


def reserve_port(host: str = "127.0.0.1") -> socket.socket:
    """A TCP socket bound to a free port of ``host``, inheritable and not yet listening
    (connections are refused until the process that takes it listens). The caller owns
    it: close it once a child has inherited it, or to give the port up. Raises OSError
    if ``host`` cannot be bound."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock
