"""A small DNS server of the tests' own: UDP on 127.0.0.1 at a free port, answering in
the real wire format (dnspython builds and parses the messages) from records the test
changes while it runs. SRV answers carry their targets' A records as glue unless
``glue`` is off (then the resolver must ask for them)."""

from __future__ import annotations

import contextlib
import socket
import threading

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset


class LocalDns:
    """Serves ``records``: ``{(name, type): [rdata text, ...]}``; names end with a dot."""

    def __init__(self, *, glue: bool = True) -> None:
        self.glue = glue
        self.records: dict[tuple[str, str], list[str]] = {}
        self.queries = 0
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """``host:port`` for a resolver's ``nameserver``."""
        host, port = self._sock.getsockname()
        return f"{host}:{port}"

    def set(self, name: str, rdtype: str, values: list[str]) -> None:
        """Replace ``name``'s records of ``rdtype`` (an empty list removes them)."""
        with self._lock:
            if values:
                self.records[(name, rdtype)] = list(values)
            else:
                self.records.pop((name, rdtype), None)

    def close(self) -> None:
        # shutdown wakes the serving thread's recvfrom (close alone would not).
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(timeout=5)

    def _answer(self, query: dns.message.Message) -> dns.message.Message:
        response = dns.message.make_response(query)
        with self._lock:
            records = dict(self.records)
        for question in query.question:
            name = question.name.to_text()
            rdtype = dns.rdatatype.to_text(question.rdtype)
            if not any(n == name for n, _ in records):
                response.set_rcode(dns.rcode.NXDOMAIN)
                continue
            values = records.get((name, rdtype))
            if not values:
                continue  # the name exists without records of this type: NOERROR, empty
            response.answer.append(dns.rrset.from_text(name, 5, "IN", rdtype, *values))
            if rdtype == "SRV" and self.glue:
                for value in values:
                    target = value.split()[-1]
                    glue = records.get((target, "A"))
                    if glue:
                        response.additional.append(dns.rrset.from_text(target, 5, "IN", "A", *glue))
        return response

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self._sock.recvfrom(4096)
            except OSError:
                return  # closed
            if not data:
                return  # shut down
            try:
                query = dns.message.from_wire(data)
            except Exception:
                continue
            with self._lock:
                self.queries += 1
            try:
                self._sock.sendto(self._answer(query).to_wire(), peer)
            except OSError:
                return
