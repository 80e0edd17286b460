"""A fault-injecting HTTP proxy for S3 fault tests and benchmarks, on 127.0.0.1 only.

It sits in front of an S3 server (moto's, in tests) so that the real S3 protocol and the real
obstore client are exercised: the store under test is simply pointed at the proxy's endpoint.
Each request is forwarded unless the proxy draws a fault for it (seeded, at ``rate``):

* ``"5xx"``: answered ``503 SlowDown`` without being forwarded, or (every other one) forwarded
  and then answered ``500 InternalError``, so the client cannot tell whether it was applied;
* ``"lost"``: forwarded and applied, then the connection is closed before any reply;
* ``"delay"``: held for ``delay_s`` (past the client's request timeout), then forwarded, so
  the request may land after the client gave up on it;
* ``"reset"``: the connection is reset (TCP RST) before the request is forwarded.

``fail_paths(method, fragment, count)`` answers ``503 SlowDown`` to the next ``count`` requests
of one method whose path contains ``fragment`` (a targeted fault: every GET of one object), until
``clear_paths()``.

``latency_s`` holds every request that long before it is forwarded (an object store's
first-byte latency, for benchmarks).

``refuse()`` closes the listening socket (every connection is refused, as for an unreachable
store) and ``heal()`` stops every fault and listens again on the same port.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
from collections import Counter

MODES = ("5xx", "lost", "delay", "reset")
_SLOW_DOWN = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code>"
              b"<Message>injected by the fault proxy</Message></Error>")


async def _read_message(reader: asyncio.StreamReader, *, reply_to: bytes = b""
                        ) -> tuple[bytes, bytes] | None:
    """One HTTP/1.1 message (head and body, by Content-Length or chunked), or ``None`` at EOF.
    ``reply_to`` is the request line a response answers (a reply to HEAD has no body)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    headers = _headers(head)
    if reply_to.startswith(b"HEAD ") or head[9:12] in (b"204", b"304"):
        return head, b""
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            body += chunk[:-2]
            if size == 0:
                break
        head = _dechunk(head, len(body))
        return head, bytes(body)
    if b"content-length" not in headers and reply_to:
        return head, await reader.read()  # a reply delimited by closing the connection
    length = int(headers.get(b"content-length", b"0"))
    return head, await reader.readexactly(length) if length else b""


def _headers(head: bytes) -> dict[bytes, bytes]:
    out = {}
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


def _dechunk(head: bytes, length: int) -> bytes:
    lines = [ln for ln in head.rstrip(b"\r\n").split(b"\r\n")
             if not ln.lower().startswith(b"transfer-encoding:")]
    return b"\r\n".join(lines + [b"content-length: %d" % length]) + b"\r\n\r\n"


def _error_response(status: int, code: bytes) -> bytes:
    body = _SLOW_DOWN % code
    reason = b"Slow Down" if status == 503 else b"Internal Server Error"
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/xml\r\ncontent-length: %d\r\n\r\n"
            % (status, reason, len(body))) + body


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:  # SO_LINGER 0: close() sends RST instead of FIN
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """The proxy, serving from a thread of its own; use as a context manager or call
    :meth:`start` and :meth:`stop`. ``endpoint`` is the URL to give the S3 client."""

    def __init__(self, upstream: str, *, rate: float = 0.0, modes=MODES, delay_s: float = 3.0,
                 seed: int = 0, port: int = 0, latency_s: float = 0.0):
        host, _, up_port = upstream.removeprefix("http://").rstrip("/").partition(":")
        if host not in ("127.0.0.1", "localhost"):
            raise ValueError("the fault proxy only forwards to this machine")
        self.upstream = (host, int(up_port or 80))
        self.rate = rate
        self.modes = tuple(modes)
        self.delay_s = delay_s
        self.latency_s = latency_s  # every request waits this long: S3's first-byte latency
        self.rng = random.Random(seed)
        self.port = port
        self.requests = 0
        self.faults: Counter[str] = Counter()
        self._fives = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._open: set[asyncio.StreamWriter] = set()
        self._targeted: list[list] = []  # [method, fragment, remaining]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- control, from any thread --

    def set_faults(self, rate: float, modes=MODES) -> None:
        unknown = set(modes) - set(MODES)
        if unknown or not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be in [0, 1] and modes in {MODES}")
        self.rate, self.modes = rate, tuple(modes)

    def fail_paths(self, method: str, fragment: str, count: int) -> None:
        """Answer ``503 SlowDown`` to the next ``count`` requests of ``method`` (``"GET"``,
        ``"PUT"``, ...) whose path contains ``fragment``, without forwarding them."""
        self._targeted.append([method.encode(), fragment.encode(), count])

    def clear_paths(self) -> None:
        """Drop every targeted fault, spent or not; the random faults go on."""
        self._targeted.clear()

    def heal(self) -> None:
        """No more faults, and connections are accepted again."""
        self.rate = 0.0
        self._targeted.clear()
        self._call(self._listen)

    def refuse(self) -> None:
        """Stop listening and drop every open connection: every request fails, with its
        connection refused, until :meth:`heal`."""
        self._call(self._close_listener)

    # -- lifecycle --

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._listen())
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._close_listener())
        self._loop.close()

    def _call(self, coro_fn) -> None:
        assert self._loop is not None, "the proxy is not running"
        asyncio.run_coroutine_threadsafe(coro_fn(), self._loop).result(10)

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port,
                                                      reuse_address=True)
            self.port = self._server.sockets[0].getsockname()[1]

    async def _close_listener(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._open):
            writer.transport.abort()

    # -- serving --

    def _draw(self, head: bytes) -> str | None:
        method, _, rest = head.partition(b" ")
        path = rest.split(b" ", 1)[0]
        for rule in self._targeted:
            if rule[2] > 0 and rule[0] == method and rule[1] in path:
                rule[2] -= 1
                self._fives += self._fives % 2  # answered without reaching the store
                return "5xx"
        if self.rate and self.rng.random() < self.rate:
            return self.rng.choice(self.modes)
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._open.add(writer)
        try:
            while True:
                message = await _read_message(reader)
                if message is None:
                    return
                head, body = message
                self.requests += 1
                fault = self._draw(head)
                if fault is not None:
                    self.faults[fault] += 1
                if fault == "reset":
                    _reset(writer)
                    return
                if fault == "5xx":
                    self._fives += 1
                    if self._fives % 2:  # refused before it reaches the store
                        writer.write(_error_response(503, b"SlowDown"))
                        await writer.drain()
                        continue
                if fault == "delay":
                    await asyncio.sleep(self.delay_s)
                elif self.latency_s:
                    await asyncio.sleep(self.latency_s)
                if upstream is None:
                    upstream = await asyncio.open_connection(*self.upstream)
                upstream[1].write(head + body)
                await upstream[1].drain()
                reply = await _read_message(upstream[0], reply_to=head)
                if reply is None:
                    return
                if fault == "lost":
                    writer.transport.abort()
                    return
                if fault == "5xx":  # applied, then answered as a server error
                    writer.write(_error_response(500, b"InternalError"))
                else:
                    writer.write(reply[0] + reply[1])
                await writer.drain()
                if b"connection: close" in reply[0].lower():
                    return
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            return
        finally:
            self._open.discard(writer)
            if upstream is not None:
                upstream[1].close()
            if not writer.transport.is_closing():
                writer.close()
