"""Protocols and helpers for the network tests (TCP, Unix, sock_*, TLS)."""

import asyncio
import socket


class RecordingProtocol(asyncio.Protocol):
    """Records every protocol callback, with futures to await them.

    ``events`` is the callback order: "made", "data", "eof", "lost",
    "pause", "resume" (consecutive "data" entries are merged).
    """

    def __init__(self, loop, *, keep_open_on_eof=False):
        self.loop = loop
        self.keep_open_on_eof = keep_open_on_eof
        self.transport = None
        self.events = []
        self.data = bytearray()
        self.made = loop.create_future()
        self.eof = loop.create_future()
        self.lost = loop.create_future()
        self.paused = loop.create_future()
        self.resumed = loop.create_future()
        self._waiters = []

    def _event(self, name):
        if not (name == "data" and self.events and self.events[-1] == "data"):
            self.events.append(name)

    def connection_made(self, transport):
        self._event("made")
        self.transport = transport
        self.made.set_result(transport)

    def data_received(self, data):
        assert isinstance(data, bytes), type(data)
        self._event("data")
        self.data += data
        self._wake()

    def eof_received(self):
        self._event("eof")
        self.eof.set_result(None)
        return self.keep_open_on_eof

    def connection_lost(self, exc):
        self._event("lost")
        self.lost.set_result(exc)
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(ConnectionError(f"lost with {len(self.data)} bytes"))

    def pause_writing(self):
        self._event("pause")
        if not self.paused.done():
            self.paused.set_result(self.transport.get_write_buffer_size())

    def resume_writing(self):
        self._event("resume")
        if not self.resumed.done():
            self.resumed.set_result(self.transport.get_write_buffer_size())

    def _wake(self):
        for entry in list(self._waiters):
            size, fut = entry
            if len(self.data) >= size:
                self._waiters.remove(entry)
                if not fut.done():
                    fut.set_result(None)

    async def received(self, size):
        """Wait until at least ``size`` bytes have arrived; return them all."""
        if len(self.data) < size:
            fut = self.loop.create_future()
            self._waiters.append((size, fut))
            await fut
        return bytes(self.data)


class EchoProtocol(RecordingProtocol):
    """Writes back everything it receives; closes after EOF unless told."""

    def data_received(self, data):
        super().data_received(data)
        self.transport.write(data)


class RecordingBufferedProtocol(asyncio.BufferedProtocol):
    """A BufferedProtocol that collects what arrives into one bytearray."""

    def __init__(self, loop, buffer_size=4096):
        self.loop = loop
        self.buffer = bytearray(buffer_size)
        self.data = bytearray()
        self.sizes_asked = []
        self.transport = None
        self.made = loop.create_future()
        self.lost = loop.create_future()
        self.eof = loop.create_future()

    def connection_made(self, transport):
        self.transport = transport
        self.made.set_result(transport)

    def get_buffer(self, sizehint):
        self.sizes_asked.append(sizehint)
        return self.buffer

    def buffer_updated(self, nbytes):
        assert 0 < nbytes <= len(self.buffer)
        self.data += self.buffer[:nbytes]

    def eof_received(self):
        self.eof.set_result(None)

    def connection_lost(self, exc):
        self.lost.set_result(exc)


def payload(size):
    """Bytes that make a lost, duplicated or reordered chunk show."""
    block = bytes(range(256)) * 4
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += counter.to_bytes(4, "big") + block
        counter += 1
    return bytes(out[:size])


def unused_tcp_port():
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_for(aw, timeout=10):
    """Await with a generous bound, so a lost event fails instead of hanging."""
    return await asyncio.wait_for(aw, timeout)
