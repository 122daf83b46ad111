"""Randomised scripts of server operations (issue 3): TCP and Unix.

Each case is one seed. The seed draws a server (serving at once or only
after ``start_serving()``) and a script: clients of four kinds arriving
alone or together (one that sends a message and reads its echo, one that
aborts as soon as it is connected, a raw socket that sends a little and
closes, resetting the connection half the time, and one that stays idle),
naps, and the server's ``close()`` (with ``close_clients()`` or
``abort_clients()`` on Pythons that have them) at some point or at the
end. The same seed runs on stock asyncio and on zloop; what is checked are
the rules asyncio keeps whatever the timing:

- each served connection sees ``connection_made`` once and first, and
  ``connection_lost`` once and last;
- an echo client that connected while the server was serving and finished
  before it closed got its message back exactly (byte for byte, in order);
  one cut off by the server's closing saw an error or an early end, never
  wrong bytes (before ``start_serving()`` the socket is not listening, and
  connections are refused);
- after ``close()`` the server is not serving, a new connection attempt
  fails, and ``wait_closed()`` returns once its connections are closed;

``close()`` is called only once every connection made so far has reached
its server protocol: stock asyncio (3.11 to 3.13 at least) cannot close a
server while a connection it accepted waits for its transport (CPython
gh-109564: ``Server._attach`` fails its assertion and the accepted socket
is never served; its client hangs or sees a reset). zloop serves such
connections; ``test_accept.py`` has the case.
- no descriptor outlives the case and nothing warns of an unclosed resource.

``ZLOOP_FUZZ_SEEDS`` picks the seeds, as for ``test_fuzz_streams.py``.
"""

import asyncio
import random
import socket
import struct
import sys

import pytest

from _fuzz import kind, seeds  # noqa: F401 (kind: a fixture)
from _net import wait_for
from _support import no_leaks  # noqa: F401 (autouse)

pytestmark = [
    pytest.mark.network,
    pytest.mark.filterwarnings("error::ResourceWarning"),
]

HOST = "127.0.0.1"
_TIMEOUT = 20
_HAS_CLOSE_CLIENTS = sys.version_info >= (3, 13)





class Served(asyncio.Protocol):
    """The server's side of one connection: echoes, closes at EOF."""

    def __init__(self, loop, errors):
        self.errors = errors
        self.state = "new"
        self.transport = None
        self.lost = loop.create_future()

    def connection_made(self, transport):
        if self.state != "new":
            self.errors.append(f"served: connection_made in state {self.state}")
        self.state = "open"
        self.transport = transport

    def data_received(self, data):
        if self.state != "open":
            self.errors.append(f"served: data_received in state {self.state}")
        self.transport.write(data)

    def eof_received(self):
        if self.state != "open":
            self.errors.append(f"served: eof_received in state {self.state}")
        return False

    def connection_lost(self, exc):
        if self.state not in ("new", "open"):
            self.errors.append(f"served: connection_lost in state {self.state}")
        self.state = "lost"
        self.lost.set_result(None)


class Client(asyncio.Protocol):
    def __init__(self, loop):
        self.received = bytearray()
        self.more = asyncio.Event()
        self.lost = loop.create_future()

    def data_received(self, data):
        self.received += data
        self.more.set()

    def eof_received(self):
        self.more.set()
        return False

    def connection_lost(self, exc):
        self.more.set()
        self.lost.set_result(exc)


class Case:
    def __init__(self, loop, rng, kind, path):
        self.loop = loop
        self.rng = rng
        self.kind = kind
        self.path = path
        self.errors = []
        self.served = []
        self.server = None
        self.addr = None
        self.closed = False  # server.close() was called
        self.idle = []  # idle clients' transports
        self.connecting = 0  # clients inside connect()
        self.connected = 0  # connections made, all clients

    def factory(self):
        proto = Served(self.loop, self.errors)
        self.served.append(proto)
        return proto

    async def start(self):
        serving = self.rng.random() < 0.7
        backlog = self.rng.choice([64, 128])
        if self.kind == "tcp":
            self.server = await self.loop.create_server(
                self.factory, HOST, 0, backlog=backlog, start_serving=serving)
            self.addr = self.server.sockets[0].getsockname()[:2]
        else:
            self.server = await self.loop.create_unix_server(
                self.factory, self.path, backlog=backlog, start_serving=serving)
            self.addr = self.path

    async def connect(self, protocol_factory):
        self.connecting += 1
        try:
            if self.kind == "tcp":
                made = await self.loop.create_connection(protocol_factory, *self.addr)
            else:
                made = await self.loop.create_unix_connection(protocol_factory, self.addr)
        finally:
            self.connecting -= 1
        self.connected += 1
        return made

    # -- clients (each a task; the server may close under any of them)

    async def echo_client(self, size):
        # A server not yet serving is not listening: connections are refused.
        serving = self.server.is_serving()
        message = self.rng.randbytes(size)
        try:
            tr, proto = await wait_for(self.connect(lambda: Client(self.loop)), _TIMEOUT)
        except OSError:
            if serving and not self.closed:
                self.errors.append("an echo client could not connect to a serving server")
            return
        tr.write(message)
        while len(proto.received) < size and not proto.lost.done():
            proto.more.clear()
            await wait_for(proto.more.wait(), _TIMEOUT)
        if not message.startswith(bytes(proto.received)):
            self.errors.append("an echo client got bytes it did not send")
        if len(proto.received) < size and not self.closed:
            self.errors.append("an echo client was cut off while the server was open")
        tr.close()
        await wait_for(proto.lost, _TIMEOUT)

    async def quit_client(self):
        try:
            tr, proto = await wait_for(self.connect(lambda: Client(self.loop)), _TIMEOUT)
        except OSError:
            return
        tr.abort()
        await wait_for(proto.lost, _TIMEOUT)

    async def raw_client(self):
        family = socket.AF_INET if self.kind == "tcp" else socket.AF_UNIX
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            self.connecting += 1
            try:
                await wait_for(self.loop.sock_connect(sock, self.addr), _TIMEOUT)
            finally:
                self.connecting -= 1
            self.connected += 1
            await self.loop.sock_sendall(sock, self.rng.randbytes(self.rng.randint(1, 2048)))
            if self.kind == "tcp" and self.rng.random() < 0.5:
                # Closed with unread data and no linger: a reset.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        finally:
            sock.close()

    async def idle_client(self):
        try:
            tr, proto = await wait_for(self.connect(lambda: Client(self.loop)), _TIMEOUT)
        except OSError:
            return
        self.idle.append((tr, proto))

    def client(self):
        how = self.rng.choices(["echo", "quit", "raw", "idle"], weights=[50, 15, 20, 15])[0]
        if how == "echo":
            size = self.rng.choice([1, self.rng.randint(2, 4096), self.rng.randint(4096, 200_000)])
            return self.echo_client(size)
        return getattr(self, f"{how}_client")()

    # -- the server's side

    async def quiesce(self):
        """Waits until every connection made has reached its protocol."""
        while self.connecting or sum(p.state != "new" for p in self.served) < self.connected:
            await asyncio.sleep(0.001)

    async def close(self):
        if self.closed:
            return
        await wait_for(self.quiesce(), _TIMEOUT)
        self.closed = True
        self.server.close()
        if self.server.is_serving():
            self.errors.append("is_serving() after close()")
        if _HAS_CLOSE_CLIENTS:
            how = self.rng.choice([None, "close_clients", "abort_clients"])
            if how is not None:
                getattr(self.server, how)()

    async def refused_after_close(self):
        try:
            tr, _ = await wait_for(self.connect(lambda: Client(self.loop)), _TIMEOUT)
        except OSError:
            return
        tr.abort()
        self.errors.append("a connection was made after close()")


async def _case(loop, kind, path, seed):
    rng = random.Random(seed)
    case = Case(loop, rng, kind, path)
    await case.start()
    tasks = []
    try:
        for _ in range(rng.randint(3, 25)):
            op = rng.choices(["client", "crowd", "start", "yield", "nap", "close"],
                             weights=[40, 10, 8, 20, 15, 4])[0]
            if op == "client":
                tasks.append(loop.create_task(case.client()))
            elif op == "crowd":
                tasks += [loop.create_task(case.client()) for _ in range(rng.randint(2, 20))]
            elif op == "start" and not case.closed:
                await case.server.start_serving()
            elif op == "yield":
                await asyncio.sleep(0)
            elif op == "nap":
                await asyncio.sleep(rng.choice([0.0005, 0.003]))
            elif op == "close":
                await case.close()
        if not case.closed and not case.server.is_serving():
            await case.server.start_serving()
        await wait_for(asyncio.gather(*tasks), _TIMEOUT)
        await case.close()
        await case.refused_after_close()
        for tr, _ in case.idle:
            tr.close()
        for _, proto in case.idle:
            await wait_for(proto.lost, _TIMEOUT)
        await wait_for(case.server.wait_closed(), _TIMEOUT)
        for proto in case.served:
            await wait_for(proto.lost, _TIMEOUT)
    finally:
        for t in tasks:
            t.cancel()
        for tr, _ in case.idle:
            tr.abort()
        if not case.closed:
            case.closed = True
            case.server.close()
        await asyncio.sleep(0)

    assert case.errors == []
    assert all(proto.state == "lost" for proto in case.served)
    assert not case.server.is_serving()


@pytest.mark.parametrize("seed", seeds())
def test_random_server_script(loop, kind, tmp_path, seed):
    loop.run_until_complete(_case(loop, kind, str(tmp_path / "s"), seed))
