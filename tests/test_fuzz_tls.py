"""Randomised scripts over TLS (issue 3): ``create_server(ssl=)`` with
``create_connection(ssl=)``, or a plain connection that both ends upgrade
with ``loop.start_tls()`` after a plain preamble.

The ends, the client's script and the checks are ``test_fuzz_streams``'s,
run through asyncio's ``sslproto`` (which zloop reuses) over each loop's
transports.  The same seed runs on stock asyncio and on zloop.  What TLS
changes:

- a TLS transport cannot ``write_eof()``: the endings are ``close``,
  ``abort`` and an abort from the server, and a server that keeps the
  connection open after EOF closes it (never ``write_eof``);
- the plain bytes of a ``start_tls`` preamble arrive whole at the server's
  plain protocol, and nothing of the TLS handshake does;
- ``loop.sendfile()`` takes asyncio's fallback (``write()`` in chunks,
  under a protocol that refuses data), so an end never resumes reading
  while that protocol holds its transport.

Four of ``test_fuzz_streams``' rules are relaxed over TLS, because
asyncio's ``sslproto`` does not keep them (each is named where
``test_fuzz_streams`` checks it):

- a ``BufferedProtocol`` may be asked ``get_buffer()`` without a
  ``buffer_updated()`` (sslproto asks before each attempt to decrypt),
  also before ``start_tls()`` returned and after ``eof_received()``;
- ``eof_received()`` may come while reading is paused, on asyncio only:
  its sslproto hands the peer's close_notify on in the read that
  delivered the data before it, and shuts down at once, whatever the
  protocol did with that data (zloop waits for the resume; ``test_tls``
  has the case);
- no write-buffer limits with a high-water mark of 0: asyncio's sslproto
  pauses an idle transport there and nothing resumes it (zloop's TLS
  protocol pauses above the mark; ``test_tls`` has the case);
- on asyncio only, ``resume_writing()`` may come after
  ``connection_lost()`` or without a ``pause_writing()``: its
  ``loop.sendfile()`` fallback resumes the protocol it hands the transport
  back to whenever it was paused at the start (zloop's hands back the
  transport's state; ``test_sendfile`` has both cases).

``ZLOOP_FUZZ_SEEDS`` picks the seeds, as for ``test_fuzz_streams.py``.
"""

import asyncio
import random

import pytest

from _fuzz import seeds
from _net import wait_for
from _support import no_leaks, short_writes_sslobject_class, tls_contexts  # noqa: F401 (no_leaks: autouse)
from test_fuzz_streams import _make_end, _mismatch, _script_and_end, _tear_down

pytestmark = [
    pytest.mark.network,
    pytest.mark.filterwarnings("error::ResourceWarning"),
]

HOST = "127.0.0.1"
_TIMEOUT = 20


@pytest.fixture(scope="module")
def contexts():
    return tls_contexts(HOST)


@pytest.fixture(scope="module")
def short_writes_contexts():
    """Contexts whose TLS objects take at most 1500 bytes a write (the
    path where asyncio's _do_write() keeps writing the rest)."""
    pair = tls_contexts(HOST)
    for ctx in pair:
        ctx.sslobject_class = short_writes_sslobject_class(1500)
    return pair


class Preamble(asyncio.Protocol):
    """A plain connection's protocol until ``start_tls``: it collects
    ``size`` bytes, then calls ``on_done(self)`` (the server answers ``go``
    and upgrades, the client upgrades)."""

    def __init__(self, size, on_done):
        self.size = size
        self.got = bytearray()
        self.on_done = on_done
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.got += data
        if len(self.got) >= self.size:
            # The next bytes are the peer's TLS: they wait in the socket
            # until start_tls takes over.
            self.transport.pause_reading()
            self.on_done(self)


async def _connect_tls(loop, rng, server_end, client_end, contexts):
    """create_server(ssl=) and create_connection(ssl=); returns the server,
    the client's transport and the list of connections served."""
    server_ctx, client_ctx = contexts
    served = []

    def factory():
        served.append(None)
        return server_end if len(served) == 1 else _make_end(loop, rng, "extra")

    server = await loop.create_server(factory, HOST, 0, ssl=server_ctx)
    addr = server.sockets[0].getsockname()[:2]
    tr, _ = await wait_for(loop.create_connection(
        lambda: client_end, *addr, ssl=client_ctx, server_hostname="localhost"), _TIMEOUT)
    await wait_for(server_end.made, _TIMEOUT)
    return server, tr, served


async def _connect_start_tls(loop, rng, server_end, client_end, contexts):
    """A plain connection that carries a preamble of plain bytes, then both
    ends' ``start_tls``."""
    server_ctx, client_ctx = contexts
    preamble = rng.randbytes(rng.choice([1, rng.randint(2, 4096), rng.randint(4096, 200_000)]))
    served = []
    upgraded = loop.create_future()

    async def upgrade(plain):
        try:
            tls = await loop.start_tls(plain.transport, server_end, server_ctx, server_side=True)
        except BaseException as exc:
            upgraded.set_exception(exc)
            raise
        server_end.connection_made(tls)
        upgraded.set_result(bytes(plain.got))

    def go_ahead(plain):
        plain.transport.write(b"go")
        loop.create_task(upgrade(plain))

    def factory():
        served.append(Preamble(len(preamble), go_ahead))
        return served[-1]

    server = await loop.create_server(factory, HOST, 0)
    addr = server.sockets[0].getsockname()[:2]
    go = loop.create_future()
    client_plain = Preamble(2, lambda _: go.set_result(None))
    tr, _ = await wait_for(loop.create_connection(lambda: client_plain, *addr), _TIMEOUT)
    tr.write(preamble)
    await wait_for(go, _TIMEOUT)
    assert bytes(client_plain.got) == b"go"
    tls = await wait_for(loop.start_tls(tr, client_end, client_ctx, server_hostname="localhost"),
                         _TIMEOUT)
    client_end.connection_made(tls)
    assert await wait_for(upgraded, _TIMEOUT) == preamble
    return server, tls, served


async def _case(loop, contexts, seed):
    rng = random.Random(seed)
    how = rng.choice([_connect_tls, _connect_start_tls])
    ending = rng.choices(["close", "abort", "server_abort"], weights=[55, 30, 15])[0]
    server_end = _make_end(loop, random.Random(rng.random()), "server")
    client_end = _make_end(loop, random.Random(rng.random()), "client")
    client_end.echo = False
    server_end.over_tls = client_end.over_tls = True
    if ending == "server_abort":
        server_end.abort_after = rng.randint(1, 256 * 1024)
    server_close = rng.choice(["auto", "close"])
    if server_close == "close":
        server_end.keep_open_on_eof = True
        server_end.on_eof = lambda: loop.call_soon(server_end.latest().transport.close)

    server, tr, served = await how(loop, rng, server_end, client_end, contexts)
    sent = bytearray()
    try:
        await _script_and_end(rng, tr, client_end, server_end, sent, ending)
    finally:
        await _tear_down(client_end, server_end, server)

    server_end, client_end = server_end.latest(), client_end.latest()
    got, echoed = bytes(server_end.received), bytes(client_end.received)
    if ending == "close" and not server_end.echo:
        assert got == bytes(sent), _mismatch("server", got, sent)
    else:
        assert bytes(sent).startswith(got), _mismatch("server", got, sent)
    assert bytes(server_end.echoed).startswith(echoed), _mismatch(
        "client (echo)", echoed, server_end.echoed)
    for end in (server_end, client_end):
        end.check_kept()
        assert end.errors == []
        assert end.state == "lost"
    assert len(served) == 1


@pytest.mark.parametrize("seed", seeds())
def test_random_tls_script(loop, contexts, short_writes_contexts, seed):
    # One seed in four runs over TLS objects that take writes in parts.
    pair = short_writes_contexts if seed % 4 == 3 else contexts
    loop.run_until_complete(_case(loop, pair, seed))
