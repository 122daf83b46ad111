"""KeyboardInterrupt and SystemExit out of a protocol callback, caught by the
application, which then runs the loop again (a REPL, a test runner, a
Ctrl-C handler that carries on).

The exception leaves the loop at once, as asyncio's ``Handle._run`` lets it;
what the loop was doing around the callback is finished all the same:
asyncio's next steps are separate handles (connection_made, then the
reader), still queued when the loop runs again. Each case asserts what a
program sees on both loops: the connection is read, echoed and closed, the
server's ``wait_closed()`` returns, what the callback wrote goes out, and
no data reported by the kernel in the interrupted pass is lost.
"""

import asyncio
import os
import socket
import tempfile

import pytest

from _net import wait_for

pytestmark = pytest.mark.network

HOST = "127.0.0.1"
EXC_TYPES = [KeyboardInterrupt, SystemExit]


class InterruptOnce(asyncio.Protocol):
    """An echo protocol whose callback named ``where`` raises ``exc_type``
    the first time it runs (after doing its work, for data_received)."""

    def __init__(self, exc_type, where, log):
        self.exc_type = exc_type
        self.where = where
        self.log = log
        self.transport = None

    def _maybe_raise(self, where):
        if self.where == where and not self.log.get("raised"):
            self.log["raised"] = where
            raise self.exc_type

    def connection_made(self, transport):
        self.transport = transport
        self.log.setdefault("made", 0)
        self.log["made"] += 1
        self._maybe_raise("connection_made")

    def data_received(self, data):
        self.log.setdefault("data", b"")
        self.log["data"] += data
        self.transport.write(data)
        if data.endswith(b"!"):
            self.transport.close()
        self._maybe_raise("data_received")

    def connection_lost(self, exc):
        self.log["lost"] = exc


def _run_through(loop, coro, exc_type):
    """Runs ``coro`` to the end, catching ``exc_type`` out of the loop as an
    interactive program would; returns the result and how often it caught."""
    task = loop.create_task(coro)
    caught = 0
    while True:
        try:
            return loop.run_until_complete(task), caught
        except exc_type:
            caught += 1
            assert caught < 5, "the same exception again and again"


async def _client_echo(loop, client, payload, connect_to=None):
    if connect_to is not None:
        await loop.sock_connect(client, connect_to)
    await loop.sock_sendall(client, payload)
    got = b""
    while True:
        chunk = await wait_for(loop.sock_recv(client, 65536))
        if not chunk:
            return got
        got += chunk


@pytest.mark.parametrize("exc_type", EXC_TYPES)
@pytest.mark.parametrize("family", ["tcp", "unix"])
@pytest.mark.parametrize("debug", [False, True], ids=["", "debug"])
def test_interrupt_in_connection_made_leaves_the_connection_served(loop, exc_type, family, debug):
    loop.set_debug(debug)
    loop.slow_callback_duration = 60
    log = {}
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "s")

    async def start():
        factory = lambda: InterruptOnce(exc_type, "connection_made", log)  # noqa: E731
        if family == "tcp":
            server = await loop.create_server(factory, HOST, 0)
            client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            addr = server.sockets[0].getsockname()
        else:
            server = await loop.create_unix_server(factory, path)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            addr = path
        client.setblocking(False)
        return server, client, addr

    server, client, addr = loop.run_until_complete(start())
    try:
        echo = _client_echo(loop, client, b"hello!", connect_to=addr)
        got, caught = _run_through(loop, echo, exc_type)
        assert (got, caught) == (b"hello!", 1)
        assert log["made"] == 1 and log["data"] == b"hello!"

        async def close():
            server.close()
            await asyncio.wait_for(server.wait_closed(), 5)

        loop.run_until_complete(close())
        assert "lost" in log
    finally:
        client.close()
        server.close()
        os.unlink(path) if os.path.exists(path) else None
        os.rmdir(tmp)


async def _serve_interrupting(loop, exc_type, log):
    """A TCP server whose first data_received raises, and a connected client."""
    server = await loop.create_server(lambda: InterruptOnce(exc_type, "data_received", log), HOST, 0)
    client = socket.socket()
    client.setblocking(False)
    await loop.sock_connect(client, server.sockets[0].getsockname())
    return server, client


def _close(loop, server, client):
    client.close()
    server.close()
    loop.run_until_complete(server.wait_closed())


@pytest.mark.parametrize("exc_type", EXC_TYPES)
def test_interrupt_in_data_received_keeps_what_it_wrote_and_what_follows(loop, exc_type):
    # The first data_received echoes, then raises: its write reaches the
    # peer, and what the peer sends next is read on the next run.
    log = {}

    server, client = loop.run_until_complete(_serve_interrupting(loop, exc_type, log))

    async def exchange():
        await loop.sock_sendall(client, b"first")
        first = b""
        while len(first) < 5:
            first += await wait_for(loop.sock_recv(client, 100))
        return first + await _client_echo(loop, client, b" then!")

    try:
        got, caught = _run_through(loop, exchange(), exc_type)
        assert (got, caught) == (b"first then!", 1)
        assert log["data"] == b"first then!"
    finally:
        _close(loop, server, client)


@pytest.mark.parametrize("exc_type", EXC_TYPES)
def test_interrupt_in_data_received_with_more_queued(loop, exc_type):
    # Several messages are queued before the server reads (several native
    # receives on io_uring, one read on epoll): whatever the first
    # data_received did not get reaches the protocol on the next run.
    log = {}

    server, client = loop.run_until_complete(_serve_interrupting(loop, exc_type, log))
    sent = [bytes([65 + i]) * 20_000 for i in range(4)] + [b"!"]

    async def flood():
        for part in sent:
            await loop.sock_sendall(client, part)
        got = b""
        while True:
            chunk = await wait_for(loop.sock_recv(client, 1 << 20))
            if not chunk:
                return got
            got += chunk

    try:
        got, caught = _run_through(loop, flood(), exc_type)
        assert caught == 1
        assert log["data"] == b"".join(sent)
        assert got == b"".join(sent)
    finally:
        _close(loop, server, client)


@pytest.mark.parametrize("exc_type", EXC_TYPES)
def test_interrupt_in_protocol_factory_loses_no_other_event(loop, exc_type):
    # One wait reports a connection to a server whose protocol factory
    # raises, and data for a sock_recv (a one-shot wait): the interrupt
    # ends the pass at the factory, and the receive still completes on the
    # next run (the kernel reported it once; it must not be dropped).
    loop.set_exception_handler(lambda lp, ctx: None)  # asyncio's accept task
    raised = []

    def factory():
        if not raised:
            raised.append(1)
            raise exc_type
        return asyncio.Protocol()

    async def start():
        server = await loop.create_server(factory, HOST, 0)
        listener = socket.socket()
        listener.bind((HOST, 0))
        listener.listen()
        a = socket.socket()
        a.connect(listener.getsockname())
        b, _ = listener.accept()
        listener.close()
        a.setblocking(False)
        return server, a, b

    server, a, b = loop.run_until_complete(start())
    recv = loop.create_task(loop.sock_recv(a, 100))
    loop.run_until_complete(asyncio.sleep(0))  # the receive is waiting
    loop.run_until_complete(asyncio.sleep(0))
    # Readiness in this order before the loop waits again.
    extra = socket.create_connection(server.sockets[0].getsockname())
    b.sendall(b"data")

    async def get():
        return await asyncio.wait_for(recv, 5)

    try:
        got, caught = _run_through(loop, get(), exc_type)
        assert got == b"data"
        assert caught <= 1
    finally:
        for s in (a, b, extra):
            s.close()
        server.close()
        loop.run_until_complete(server.wait_closed())
