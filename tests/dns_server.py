"""A name server the test controls, on a loopback address: each question is answered as the
test's ``answer`` function says (addresses, no such name, or silence), and logged.

The security tests point the stack's API and worker at it (a mount namespace whose
``/etc/resolv.conf`` names it), so what they resolve, and how often, is the test's to decide and
to read back: the rebinding name answers an allowed address first and 127.0.0.1 next; the
hanging name is never answered. Only loopback: nothing here reaches a public address.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset

NXDOMAIN = "nxdomain"
SILENT = None  # never answered: the asker waits for its own timeout
# addresses, NXDOMAIN or SILENT, for (name without the final dot, "A" or "AAAA", how many
# times this name and type were asked before)
Answer = Callable[[str, str, int], "list[str] | str | None"]


@dataclass
class Question:
    name: str
    rdtype: str
    answered: list[str] | str | None
    at: float  # time.monotonic() when it came, to order it against the test's other logs


@dataclass
class DnsServer:
    address: str
    answer: Answer
    port: int = 53
    log: list[Question] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind((self.address, self.port))
        self.port = self._sock.getsockname()[1]
        self._sock.settimeout(0.2)  # so ``close`` is seen at once, not at the next question
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._asked: dict[tuple[str, str], int] = {}
        self._thread = threading.Thread(target=self._serve, daemon=True, name="test-dns")
        self._thread.start()

    def asked(self, name: str, rdtype: str = "A") -> list[Question]:
        with self._lock:
            return [q for q in self.log if q.name == name and q.rdtype == rdtype]

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                data, peer = self._sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            try:
                query = dns.message.from_wire(data)
            except Exception:  # noqa: BLE001 - not a DNS message: ignored, like a server would
                continue
            if not query.question:
                continue
            q = query.question[0]
            name, rdtype = q.name.to_text(omit_final_dot=True).lower(), dns.rdatatype.to_text(q.rdtype)
            with self._lock:
                count = self._asked.get((name, rdtype), 0)
                self._asked[(name, rdtype)] = count + 1
            said = self.answer(name, rdtype, count) if rdtype in ("A", "AAAA") else []
            with self._lock:
                self.log.append(Question(name, rdtype, said, time.monotonic()))
            if said is SILENT:
                continue
            response = dns.message.make_response(query)
            response.flags |= dns.flags.RA
            if said == NXDOMAIN:
                response.set_rcode(dns.rcode.NXDOMAIN)
            elif said:
                response.answer.append(dns.rrset.from_text(q.name, 0, "IN", rdtype, *said))
            self._sock.sendto(response.to_wire(), peer)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5)
        self._sock.close()
