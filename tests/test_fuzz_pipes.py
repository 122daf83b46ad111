"""Randomised scripts of pipe-transport operations (issue 4): both ends of a
pipe in this process, through ``connect_write_pipe`` and
``connect_read_pipe``.

Each case is one seed.  The seed draws the pipe (``os.pipe()`` or a Unix
``socketpair``, which asyncio's pipe transports accept too), a script for
the writer (writes of every size and buffer type, ``writelines``, new
write-buffer limits, waits for ``resume_writing``, naps), whether the
reader pauses its own reading now and then, and how the pipe ends: the
writer's ``write_eof``, ``close`` or ``abort``, or the reader closing its
end early, which the writer must notice (its end turns readable, or a
write fails with ``EPIPE``) without writing again.  The same seed runs on
stock asyncio and on zloop; the rules asyncio keeps whatever the timing:

- the reader gets exactly what was written after ``write_eof`` or
  ``close`` (they flush first), a prefix of it after ``abort`` or its own
  early close;
- ``connection_made`` first, ``connection_lost`` once and last on both
  ends; the reader's ``eof_received`` once, before it, unless the reader
  closed first; no ``data_received`` between ``pause_reading()`` and
  ``resume_reading()``; ``pause_writing`` and ``resume_writing``
  alternate;
- the writer's ``connection_lost`` gets ``None`` unless its reader went
  away (then ``None`` or an ``OSError``: ``BrokenPipeError`` from a write,
  ``ConnectionResetError`` on a socket whose peer closed with data unread);
- no descriptor outlives the case and nothing warns of an unclosed
  resource.

``ZLOOP_FUZZ_SEEDS`` picks the seeds, as for ``test_fuzz_streams.py``.
"""

import asyncio
import os
import random
import socket

import pytest

from _fuzz import seeds, shaped, write_random
from _net import wait_for
from _support import no_leaks  # noqa: F401 (autouse)

pytestmark = pytest.mark.filterwarnings("error::ResourceWarning")

_TIMEOUT = 20


class _End(asyncio.Protocol):
    """One end's callbacks, checked as they come (rule breaks are kept in
    ``errors``: raising in a callback only reaches the exception handler)."""

    def __init__(self, loop, name):
        self.loop = loop
        self.name = name
        self.errors = []
        self.transport = None
        self.made = loop.create_future()
        self.lost = loop.create_future()

    def _bad(self, what):
        self.errors.append(f"{self.name}: {what}")

    def connection_made(self, transport):
        if self.made.done():
            self._bad("connection_made twice")
            return
        self.transport = transport
        self.made.set_result(None)

    def connection_lost(self, exc):
        if not self.made.done():
            self._bad("connection_lost before connection_made")
        if self.lost.done():
            self._bad("connection_lost twice")
            return
        self.lost.set_result(exc)


class Reader(_End):
    def __init__(self, loop, rng, *, pause_reads, close_after):
        super().__init__(loop, "reader")
        self.rng = rng
        self.pause_reads = pause_reads
        # Close the read end once this many bytes have arrived (None: no).
        self.close_after = close_after
        self.received = bytearray()
        self.eofs = 0
        self.paused = False
        self.closed_early = False

    def data_received(self, data):
        if self.lost.done() or self.eofs:
            self._bad("data_received after eof or connection_lost")
        if self.paused:
            self._bad("data_received while reading is paused")
        if type(data) is not bytes or not data:
            self._bad(f"data_received({type(data).__name__} of {len(data)})")
        self.received += data
        if self.close_after is not None and len(self.received) >= self.close_after:
            self.close_early()
        elif self.pause_reads and self.rng.random() < 0.15:
            self.pause()
            self.loop.call_later(self.rng.choice([0, 0, 0.0005, 0.003]), self.resume)

    def close_early(self):
        if not self.transport.is_closing():
            self.closed_early = True
            self.transport.close()

    def pause(self):
        if not self.paused and not self.transport.is_closing():
            self.transport.pause_reading()
            self.paused = True
            if self.transport.is_reading():
                self._bad("is_reading() after pause_reading()")

    def resume(self):
        if self.paused:
            self.paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()

    def eof_received(self):
        if self.lost.done() or self.eofs:
            self._bad("eof_received after eof or connection_lost")
        self.eofs += 1


class Writer(_End):
    def __init__(self, loop):
        super().__init__(loop, "writer")
        self.writing_paused = False
        self.resumed = None

    def pause_writing(self):
        if self.lost.done():
            self._bad("pause_writing after connection_lost")
        if self.writing_paused:
            self._bad("pause_writing twice")
        self.writing_paused = True
        self.resumed = self.loop.create_future()

    def resume_writing(self):
        if not self.writing_paused:
            self._bad("resume_writing without pause_writing")
        self.writing_paused = False
        self.resumed.set_result(None)

    def connection_lost(self, exc):
        super().connection_lost(exc)
        if self.resumed is not None and not self.resumed.done():
            self.resumed.set_result(None)


def _chunk(rng):
    size = rng.choices([rng.randint(1, 100), rng.randint(100, 8192),
                        rng.randint(8192, 128 * 1024), rng.randint(128 * 1024, 1024 * 1024)],
                       weights=[35, 35, 25, 5])[0]
    return shaped(rng, rng.randbytes(size))


async def _script(rng, reader, writer, sent):
    tr = writer.transport
    for _ in range(rng.randint(5, 50)):
        if writer.lost.done():
            return
        op = rng.choices(["write", "writelines", "limits", "size", "drain", "pause", "nap", "yield"],
                         weights=[40, 10, 5, 4, 15, 5, 6, 15])[0]
        if op in ("write", "writelines"):
            write_random(rng, tr, sent, _chunk, lines=op == "writelines")
        elif op == "limits":
            high = rng.choice([0, 1, 1024, 64 * 1024, 1024 * 1024])
            tr.set_write_buffer_limits(high=high, low=rng.choice([None, 0, high // 4]))
        elif op == "size":
            if tr.get_write_buffer_size() < 0:
                writer._bad("negative write buffer size")
        elif op == "drain":
            if writer.writing_paused:
                await wait_for(writer.resumed, _TIMEOUT)
        elif op == "pause":
            reader.pause()
            reader.loop.call_later(rng.choice([0, 0.002]), reader.resume)
        elif op == "nap":
            await asyncio.sleep(rng.choice([0.0005, 0.002]))
        else:
            await asyncio.sleep(0)


def _pipe(rng):
    if rng.random() < 0.6:
        r, w = os.pipe()
        return open(r, "rb", buffering=0), open(w, "wb", buffering=0)
    # Neither end is shut down halfway: a write end that reads EOF takes it
    # for its reader's going away, as asyncio's does.
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


async def _case(loop, seed):
    rng = random.Random(seed)
    ending = rng.choices(["write_eof", "close", "abort", "reader_closes"],
                         weights=[40, 25, 15, 20])[0]
    reader = Reader(loop, random.Random(rng.random()), pause_reads=rng.random() < 0.5,
                    close_after=rng.randint(1, 512 * 1024) if ending == "reader_closes" else None)
    writer = Writer(loop)
    read_end, write_end = _pipe(rng)
    sent = bytearray()
    transports = []
    try:
        rtr, _ = await loop.connect_read_pipe(lambda: reader, read_end)
        transports.append(rtr)
        wtr, _ = await loop.connect_write_pipe(lambda: writer, write_end)
        transports.append(wtr)
        await _script(rng, reader, writer, sent)
        reader.resume()
        if ending == "reader_closes":
            # Write on until the reader has gone and the writer noticed.
            while not reader.closed_early and not writer.lost.done():
                data = rng.randbytes(rng.randint(1, 65536))
                wtr.write(data)
                sent += data
                await asyncio.sleep(0.001)
            if not writer.lost.done():
                # Its reader gone, an idle writer must notice by itself.
                await wait_for(reader.lost, _TIMEOUT)
        elif ending == "write_eof":
            wtr.write_eof()
        elif ending == "close":
            wtr.close()
        else:
            wtr.abort()
        await wait_for(writer.lost, _TIMEOUT)
        await wait_for(reader.lost, _TIMEOUT)
    finally:
        for tr in transports:
            if not tr.is_closing():
                tr.close()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        for end in (read_end, write_end):
            end.close()  # closed by its transport already, unless making one failed
    assert reader.errors == [] and writer.errors == []
    got = bytes(reader.received)
    if ending in ("write_eof", "close"):
        assert got == bytes(sent), f"reader got {len(got)} bytes of {len(sent)}"
        assert reader.eofs == 1
        assert writer.lost.result() is None
    else:
        assert bytes(sent).startswith(got), f"reader got {len(got)} bytes, not a prefix"
    if ending == "abort":
        assert writer.lost.result() is None
        assert reader.eofs == 1
    if ending == "reader_closes":
        exc = writer.lost.result()
        assert exc is None or isinstance(exc, OSError), repr(exc)
        assert reader.closed_early and reader.eofs == 0
    assert reader.lost.result() is None


@pytest.mark.parametrize("seed", seeds())
def test_random_pipe_script(loop, seed):
    loop.run_until_complete(_case(loop, seed))
