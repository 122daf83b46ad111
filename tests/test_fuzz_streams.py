"""Randomised scripts of stream-transport operations (issue 3), TCP and Unix.

Each case is one seed.  The seed draws the protocols at both ends (plain or
buffered, echoing or not, keeping some of the ``bytes`` it receives or not,
pausing its own reading now and then), a script of operations for the client
(writes of every size and buffer type, ``writelines``, new write-buffer
limits, ``get_write_buffer_size``, waits for ``resume_writing``, pausing and
resuming its reading, naps) and how the connection ends (``write_eof``,
``close``, ``abort``, or an abort from the server).  The same seed runs on
stock asyncio and on zloop; timing makes the interleaving differ from run to
run, so what is checked are the rules that hold on asyncio whatever the
interleaving:

- bytes arrive whole and in order: after ``write_eof`` or ``close`` the
  server got exactly what the client wrote, after an abort a prefix of it;
  an echo arrives exactly (``write_eof``) or as a prefix (otherwise);
- a ``bytes`` a protocol kept from ``data_received`` still holds what it
  held when it arrived (a loop that recycles its read buffers must not
  recycle one that is still referenced);
- callbacks come in asyncio's order: ``connection_made`` first,
  ``connection_lost`` once and last, nothing after ``eof_received`` but
  ``connection_lost``, no ``data_received`` or ``eof_received`` between
  ``pause_reading()`` and ``resume_reading()``, ``pause_writing`` and
  ``resume_writing`` alternating, ``get_buffer`` answered by one
  ``buffer_updated`` within the buffer's size (asyncio asks again without
  one only when its read finds nothing, which a readiness report that is
  current never causes: a stale one from io_uring did);
- no descriptor outlives the case and nothing warns of an unclosed resource;
- after ``set_protocol()`` (either end hands its transport to a protocol
  of the other kind, plain or buffered, now and then, from inside its
  read callback) the old protocol is called no more and the new one gets
  the rest of the bytes, in order.

``ZLOOP_FUZZ_SEEDS`` picks the seeds: a count (``200``: seeds 0-199) or a
range (``1000-1999``); the default, 40, is kept short for CI.  A failure
names its seed, and the same seed replays the same script.
"""

import asyncio
import random
import tempfile
import zlib

import pytest

from _fuzz import kind, seeds, shaped  # noqa: F401 (kind: a fixture)
from _net import wait_for
from _support import no_leaks  # noqa: F401 (autouse)

pytestmark = [
    pytest.mark.network,
    pytest.mark.filterwarnings("error::ResourceWarning"),
]

HOST = "127.0.0.1"
_TIMEOUT = 20





# ------------------------------------------------------------ the ends


class End:
    """One end's protocol state, checked on every callback.

    Rule breaks are collected in ``errors`` (raising inside a callback would
    only reach the loop's exception handler).
    """

    def __init__(self, loop, rng, name, *, echo, keep, pause_reads):
        self.loop = loop
        self.rng = rng
        self.name = name
        self.echo = echo
        self.keep = keep
        self.pause_reads = pause_reads
        self.errors = []
        self.transport = None
        self.received = bytearray()
        self.echoed = bytearray()
        self.kept = []  # (bytes, length, crc) as it arrived
        self.state = "new"  # new -> open -> eof -> lost
        self.reading_paused = False
        self.writing_paused = False
        self.made = loop.create_future()
        self.eof = loop.create_future()
        self.lost = loop.create_future()
        self.resumed = None
        self.keep_open_on_eof = False
        self.on_eof = None
        # Abort the connection once this many bytes have arrived (None: no).
        self.abort_after = None
        # Chance, per arrival, of handing the transport to a protocol of the
        # other kind (set_protocol) that carries on where this one stopped.
        self.switch_chance = 0.0
        self.successor = None
        # Over TLS (test_fuzz_tls) asyncio's sslproto asks for buffers
        # it may not fill: see BufferedEnd.get_buffer.
        self.over_tls = False

    def _bad(self, what):
        self.errors.append(f"{self.name}: {what} (state {self.state})")

    def _on_asyncio_sslproto(self):
        """Over TLS on stock asyncio, whose sslproto and sendfile fallback
        break rules zloop keeps (each place that asks says which)."""
        return self.over_tls and not type(self.loop).__module__.startswith("zloop")

    def _expect(self, *states, what):
        if self.successor is not None:
            self._bad(f"{what} after set_protocol() replaced this protocol")
        if self.state not in states:
            self._bad(f"{what} out of order")

    def latest(self):
        """The protocol that replaced this one, if any, and so on."""
        end = self
        while end.successor is not None:
            end = end.successor
        return end

    def _switch(self):
        """Hands the transport to a protocol of the other kind, in this
        one's state (the same lists and futures): from now on it alone is
        called."""
        cls = BufferedEnd if isinstance(self, PlainEnd) else PlainEnd
        new = cls.__new__(cls)
        new.__dict__.update(self.__dict__)
        new.offered = None
        self.successor = new
        self.transport.set_protocol(new)
        if self.transport.get_protocol() is not new:
            self._bad("get_protocol() is not what set_protocol() set")

    # -- reading control (through the transport, tracked here)

    def pause_reading(self):
        if self.successor is not None:
            return self.latest().pause_reading()
        if self.state in ("open",) and not self.transport.is_closing():
            self.transport.pause_reading()
            self.reading_paused = True

    def resume_reading(self):
        if self.successor is not None:  # scheduled before a set_protocol()
            return self.latest().resume_reading()
        if self.reading_paused:
            if self.transport.get_protocol() is not self and not self.transport.is_closing():
                # loop.sendfile()'s fallback (over TLS) holds the transport,
                # paused: resumed, it would get data it refuses.  Later.
                self.loop.call_later(0.001, self.resume_reading)
                return
            self.reading_paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()

    def _maybe_pause_own_reading(self):
        if self.pause_reads and self.rng.random() < 0.15:
            self.pause_reading()
            delay = self.rng.choice([0, 0, 0.0005, 0.003])
            self.loop.call_later(delay, self.resume_reading)

    # -- callbacks

    def connection_made(self, transport):
        self._expect("new", what="connection_made")
        self.state = "open"
        self.transport = transport
        self.made.set_result(transport)

    def _got(self, data):
        self._expect("open", what="data")
        if self.reading_paused:
            self._bad("data while reading is paused")
        if not data:
            self._bad("empty data")
        self.received += data
        if self.echo and not self.transport.is_closing():
            self._write_back(data)
        self._maybe_pause_own_reading()
        if self.abort_after is not None and len(self.received) >= self.abort_after:
            if not self.transport.is_closing():
                self.transport.abort()
        elif self.rng.random() < self.switch_chance and not self.transport.is_closing():
            self._switch()

    def _write_back(self, data):
        how = self.rng.randrange(4)
        if how == 0 or len(data) < 2:
            self.transport.write(data)
        elif how == 1:
            cut = self.rng.randrange(1, len(data))
            self.transport.writelines([data[:cut], memoryview(data)[cut:]])
        elif how == 2:
            cut = self.rng.randrange(1, len(data))
            self.transport.write(memoryview(data)[:cut])
            self.transport.write(data[cut:])
        else:
            self.transport.write(bytearray(data))
        self.echoed += data

    def eof_received(self):
        self._expect("open", what="eof_received")
        # asyncio's sslproto may deliver the peer's close_notify while
        # reading is paused (see test_fuzz_tls); zloop's does not.
        if self.reading_paused and not self._on_asyncio_sslproto():
            self._bad("eof while reading is paused")
        self.state = "eof"
        self.eof.set_result(None)
        if self.on_eof is not None:
            self.on_eof()
        return self.keep_open_on_eof

    def connection_lost(self, exc):
        self._expect("new", "open", "eof", what="connection_lost")
        self.state = "lost"
        self.lost.set_result(exc)
        if self.resumed is not None and not self.resumed.done():
            self.resumed.set_result(None)

    def pause_writing(self):
        self._expect("open", "eof", what="pause_writing")
        if self.writing_paused:
            self._bad("pause_writing twice")
        self.writing_paused = True
        self.resumed = self.loop.create_future()

    def resume_writing(self):
        # asyncio's loop.sendfile() fallback (taken over TLS) calls this
        # when it hands the transport back if the protocol was paused when
        # it began: after connection_lost() too, or with the transport
        # still paused (zloop's hands back the transport's state; its
        # test_sendfile has both cases).
        if not self._on_asyncio_sslproto():
            self._expect("open", "eof", what="resume_writing")
            if not self.writing_paused:
                self._bad("resume_writing without pause_writing")
        self.writing_paused = False
        if self.resumed is not None and not self.resumed.done():
            self.resumed.set_result(None)

    def check_kept(self):
        for data, size, crc in self.kept:
            if len(data) != size or zlib.crc32(data) != crc:
                self._bad("a kept data_received bytes changed after it arrived")


class PlainEnd(End, asyncio.Protocol):
    def data_received(self, data):
        if type(data) is not bytes:
            self._bad(f"data_received got {type(data).__name__}")
        if self.keep and self.rng.random() < 0.3:
            self.kept.append((data, len(data), zlib.crc32(data)))
        self._got(data)


class BufferedEnd(End, asyncio.BufferedProtocol):
    _SIZES = (1, 7, 1024, 4096, 65536, 262144)
    _WEIGHTS = (1, 1, 20, 20, 30, 28)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.offered = None

    def get_buffer(self, sizehint):
        if self.over_tls:
            # sslproto asks for a buffer before each attempt to decrypt,
            # and leaves it unfilled when no whole record has come: even
            # before start_tls() returned (before connection_made) and
            # after eof_received.  What it does fill is checked below.
            if self.successor is not None or self.state == "lost":
                self._bad("get_buffer after set_protocol() or connection_lost")
        else:
            self._expect("open", what="get_buffer")
            if self.offered is not None:
                self._bad("get_buffer twice without buffer_updated")
        size = self.rng.choices(self._SIZES, self._WEIGHTS)[0]
        # A bytearray of its own now and then (asyncio's sslproto decrypts
        # into a copy of one, CPython gh-156275: not offered to it over TLS).
        if not self._on_asyncio_sslproto() and self.rng.random() < 0.3:
            self.offered = bytearray(size)
        else:
            self.offered = memoryview(bytearray(size + 8))[4:4 + size]
        return self.offered

    def buffer_updated(self, nbytes):
        if self.offered is None:
            self._bad("buffer_updated without get_buffer")
            return
        if not 0 < nbytes <= len(self.offered):
            self._bad(f"buffer_updated({nbytes}) for a buffer of {len(self.offered)}")
        data = bytes(self.offered[:nbytes])
        self.offered = None
        self._got(data)


# ----------------------------------------------------------- the script


def _chunk(rng):
    """Random bytes of a random size, as bytes, bytearray or a memoryview."""
    size = rng.choices(
        [0, rng.randint(1, 100), rng.randint(100, 4096),
         rng.randint(4096, 65536), rng.randint(256 * 1024, 2 * 1024 * 1024)],
        weights=[2, 30, 35, 28, 5],
    )[0]
    return shaped(rng, rng.randbytes(size))


def _limits(rng):
    high = rng.choice([None, 0, 1, 1024, 64 * 1024, 1024 * 1024])
    if high is None:
        return {"low": rng.choice([None, 0, 512, 16 * 1024])}
    return {"high": high, "low": rng.choice([None, 0, high // 4, high])}


async def _sendfile(loop, rng, tr, sent, *, peer_may_end):
    """loop.sendfile() of a temporary file's random bytes, from an offset.
    A peer that aborts on its own (``server_abort``) may cut it short (an
    error, or fewer bytes than asked for: asyncio's fallback to write()
    stops at a closed transport): then some of the bytes may have arrived,
    and what the peer got is checked as a prefix."""
    size = rng.choice([1, rng.randint(2, 65536), rng.randint(65536, 1024 * 1024)])
    data = rng.randbytes(size)
    lead = rng.randrange(3) * 1000
    with tempfile.TemporaryFile() as f:
        f.write(bytes(lead) + data + b"tail")
        f.flush()
        # asyncio's fallback (over TLS) reads from the file's position
        # when offset is 0, where os.sendfile() reads from 0.
        f.seek(0)
        try:
            sent_now = await loop.sendfile(tr, f, offset=lead, count=size)
        except ConnectionError:
            if not peer_may_end:
                raise
            sent_now = None  # cut short
        if sent_now != size and not peer_may_end:
            raise AssertionError(f"sendfile() sent {sent_now} of {size}")
        if sent_now == size and f.tell() != lead + size:
            raise AssertionError(f"sendfile() left the file at {f.tell()}, not {lead + size}")
    sent += data


async def _client_script(rng, end, sent, *, peer_may_end):
    tr = end.transport
    for _ in range(rng.randint(10, 80)):
        end = end.latest()  # it may have handed the transport on
        if end.state == "lost":
            return
        op = rng.choices(
            ["write", "writelines", "limits", "size", "yield", "nap", "drain",
             "pause", "resume", "query", "sendfile"],
            weights=[40, 10, 4, 4, 12, 4, 10, 3, 3, 2, 3],
        )[0]
        if op == "write":
            data, arg = _chunk(rng)
            tr.write(arg)
            sent += data
        elif op == "writelines":
            parts = [_chunk(rng) for _ in range(rng.randint(1, 6))]
            # Never an empty chunk last: asyncio 3.12+ would keep it queued
            # for ever and never send a write_eof() that follows (this fuzz
            # hung there; test_write_path has the case).
            while parts and not parts[-1][0]:
                parts.pop()
            if tr.is_closing():
                # asyncio 3.12+'s close() clears the method writelines()
                # calls, which then raises TypeError; write()
                # drops what it is given, as zloop's writelines() does.
                for _, arg in parts:
                    tr.write(arg)
            else:
                tr.writelines([arg for _, arg in parts])
            for data, _ in parts:
                sent += data
        elif op == "limits":
            limits = _limits(rng)
            low = limits["low"]
            high = limits.get("high", 65536 if low is None else 4 * low)
            if end.over_tls and high == 0:
                # asyncio's sslproto pauses at a buffer size >= high, where
                # the other transports pause at > high: with high 0 it
                # pauses an empty buffer, and only a later write or read
                # resumes it, so a writer that waits first waits for ever
                # (zloop's TLS protocol pauses at > high: test_tls has it).
                limits = {"high": 1, "low": 0}
            tr.set_write_buffer_limits(**limits)
            low, high = tr.get_write_buffer_limits()
            if not 0 <= low <= high:
                end._bad(f"limits {limits} read back as ({low}, {high})")
        elif op == "size":
            if tr.get_write_buffer_size() < 0:
                end._bad("negative write buffer size")
        elif op == "yield":
            await asyncio.sleep(0)
        elif op == "nap":
            await asyncio.sleep(rng.choice([0.0005, 0.002]))
        elif op == "drain":
            if end.writing_paused:
                await wait_for(end.resumed, _TIMEOUT)
        elif op == "sendfile":
            if not tr.is_closing():
                await _sendfile(end.loop, rng, tr, sent, peer_may_end=peer_may_end)
        elif op == "pause":
            end.pause_reading()
        elif op == "resume":
            end.resume_reading()
        else:
            if tr.is_closing() and not peer_may_end:
                end._bad("is_closing() before the client ended")
            # A TLS transport cannot (test_fuzz_tls runs this script too).
            if tr.can_write_eof() is not (tr.get_extra_info("ssl_object") is None):
                end._bad(f"can_write_eof() is {tr.can_write_eof()}")
            tr.get_extra_info("sockname")


# ------------------------------------------------------------- the case


async def _serve(loop, kind, path, factory):
    if kind == "tcp":
        server = await loop.create_server(factory, HOST, 0)
        addr = server.sockets[0].getsockname()[:2]

        async def connect(client_factory):
            return await loop.create_connection(client_factory, *addr)
    else:
        server = await loop.create_unix_server(factory, path)

        async def connect(client_factory):
            return await loop.create_unix_connection(client_factory, path)
    return server, connect


def _make_end(loop, rng, name):
    cls = rng.choice([PlainEnd, BufferedEnd])
    return cls(
        loop, rng, name,
        echo=rng.random() < 0.5,
        keep=rng.random() < 0.5,
        pause_reads=rng.random() < 0.5,
    )


async def _script_and_end(rng, tr, client_end, server_end, sent, ending):
    """The client's script, then its ending; waits for both ends' loss."""
    await _client_script(rng, client_end, sent, peer_may_end=ending == "server_abort")
    client_end.resume_reading()
    if ending == "server_abort":
        # Keep writing until the server's abort reaches the client.
        while client_end.latest().state != "lost":
            data = rng.randbytes(rng.randint(1, 65536))
            tr.write(data)
            sent += data
            await asyncio.sleep(0.001)
    elif ending == "write_eof":
        tr.write_eof()
    elif ending == "close":
        tr.close()
    else:
        tr.abort()
    await wait_for(client_end.lost, _TIMEOUT)
    await wait_for(server_end.lost, _TIMEOUT)


async def _tear_down(client_end, server_end, server):
    """Whatever the case left open (it failed): aborted; the server closed."""
    for end in (client_end, server_end):
        if end.transport is not None and not end.lost.done():
            end.transport.abort()
    await asyncio.sleep(0)
    server.close()
    await wait_for(server.wait_closed(), _TIMEOUT)


async def _case(loop, kind, path, seed):
    rng = random.Random(seed)
    ending = rng.choices(["write_eof", "close", "abort", "server_abort"],
                         weights=[45, 25, 20, 10])[0]
    server_end = _make_end(loop, random.Random(rng.random()), "server")
    client_end = _make_end(loop, random.Random(rng.random()), "client")
    client_end.echo = False  # the client's writes are the script's
    server_close = rng.choice(["auto", "close", "write_eof"])
    abort_after = rng.randint(1, 256 * 1024)

    served = []

    def factory():
        served.append(None)
        if len(served) > 1:  # never expected: counted, checked below
            return _make_end(loop, rng, "extra")
        return server_end

    if server_close != "auto":
        server_end.keep_open_on_eof = True

        def after_eof():
            tr = server_end.transport
            if server_close == "write_eof":
                tr.write_eof()
            loop.call_soon(tr.close)

        server_end.on_eof = after_eof

    if ending == "server_abort":
        server_end.abort_after = abort_after
    for end in (server_end, client_end):
        end.switch_chance = end.rng.choice([0.0, 0.0, 0.02, 0.1])

    server, connect = await _serve(loop, kind, path, factory)
    sent = bytearray()
    try:
        tr, _ = await wait_for(connect(lambda: client_end), _TIMEOUT)
        await wait_for(server_end.made, _TIMEOUT)
        await _script_and_end(rng, tr, client_end, server_end, sent, ending)
    finally:
        await _tear_down(client_end, server_end, server)

    server_end, client_end = server_end.latest(), client_end.latest()
    got, echoed = bytes(server_end.received), bytes(client_end.received)
    exact = ending == "write_eof" or (ending == "close" and not server_end.echo)
    if exact:
        assert got == bytes(sent), _mismatch("server", got, sent)
    else:
        assert bytes(sent).startswith(got), _mismatch("server", got, sent)
    back = bytes(server_end.echoed)
    if exact and server_end.echo:
        assert back == got
        assert echoed == back, _mismatch("client (echo)", echoed, back)
    else:
        assert back.startswith(echoed), _mismatch("client (echo)", echoed, back)
    if ending == "write_eof":
        assert client_end.lost.result() is None
        assert server_end.lost.result() is None
    for end in (server_end, client_end):
        end.check_kept()
        assert end.errors == []
        assert end.state == "lost"
    assert len(served) == 1


def _mismatch(where, got, want):
    common = 0
    for common, (a, b) in enumerate(zip(got, want)):
        if a != b:
            break
    else:
        common = min(len(got), len(want))
    return f"{where} got {len(got)} bytes of {len(want)}, first difference at {common}"


@pytest.mark.parametrize("seed", seeds())
def test_random_script(loop, kind, tmp_path, seed):
    loop.run_until_complete(_case(loop, kind, str(tmp_path / "s"), seed))
