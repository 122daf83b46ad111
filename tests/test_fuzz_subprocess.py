"""Randomised scripts of subprocess-pipe operations (issue 4).

Each case is one seed. The seed draws a ``cat`` child (its stderr a pipe or
not), a script of writes to its stdin (every size up to 256 KiB as bytes,
bytearray or memoryview; ``writelines``; new write-buffer limits; waits for
``resume_writing``), pauses and resumes of its stdout pipe's reading, naps,
and how it ends (``write_eof``, closing the stdin pipe, or killing the
child). The same seed runs on stock asyncio and on zloop; the rules asyncio
keeps whatever the timing:

- stdout brings back exactly what was written, in order, unless the child
  was killed (then a prefix of it); stderr brings nothing;
- pausing and resuming the stdout pipe loses and reorders nothing (data
  may still arrive just after ``pause_reading()``: asyncio hands a pipe's
  data to the protocol with ``call_soon``, so a read done before the pause
  is delivered after it);
- ``pipe_connection_lost`` once per pipe, ``process_exited`` once,
  ``connection_lost`` once and last, after both; ``pause_writing`` and
  ``resume_writing`` alternate;
- the return code is 0, or -SIGKILL when killed; no descriptor outlives the
  case.

``ZLOOP_FUZZ_SEEDS`` picks the seeds, as for ``test_fuzz_streams.py``.
"""

import asyncio
import random
import signal
import subprocess

import pytest

from _fuzz import seeds, shaped, write_random
from _net import wait_for
from _support import no_leaks  # noqa: F401 (autouse)

pytestmark = pytest.mark.filterwarnings("error::ResourceWarning")

_TIMEOUT = 20


class Child(asyncio.SubprocessProtocol):
    def __init__(self, loop, rng):
        self.loop = loop
        self.rng = rng
        self.errors = []
        self.transport = None
        self.out = bytearray()
        self.err = bytearray()
        self.pipes_lost = []
        self.exited = False
        self.lost = loop.create_future()
        self.writing_paused = False
        self.resumed = None
        self.out_paused = False

    def _bad(self, what):
        self.errors.append(what)

    def connection_made(self, transport):
        self.transport = transport

    def pipe_data_received(self, fd, data):
        if self.lost.done():
            self._bad(f"data on fd {fd} after connection_lost")
        if fd == 1:
            self.out += data
            if self.rng.random() < 0.1:
                self.pause_out()
                self.loop.call_later(self.rng.choice([0, 0.001]), self.resume_out)
        else:
            self.err += data

    def pause_out(self):
        pipe = self.transport.get_pipe_transport(1)
        if pipe is not None and not pipe.is_closing() and not self.out_paused:
            pipe.pause_reading()
            self.out_paused = True

    def resume_out(self):
        if not self.out_paused:
            return
        self.out_paused = False
        pipe = self.transport.get_pipe_transport(1)
        if pipe is not None and not pipe.is_closing():
            pipe.resume_reading()

    def pipe_connection_lost(self, fd, exc):
        if fd in self.pipes_lost:
            self._bad(f"pipe_connection_lost({fd}) twice")
        if self.lost.done():
            self._bad(f"pipe_connection_lost({fd}) after connection_lost")
        self.pipes_lost.append(fd)

    def process_exited(self):
        if self.exited:
            self._bad("process_exited twice")
        if self.lost.done():
            self._bad("process_exited after connection_lost")
        self.exited = True

    def connection_lost(self, exc):
        if self.lost.done():
            self._bad("connection_lost twice")
            return
        if not self.exited:
            self._bad("connection_lost before process_exited")
        self.lost.set_result(exc)
        if self.resumed is not None and not self.resumed.done():
            self.resumed.set_result(None)

    def pause_writing(self):
        if self.writing_paused:
            self._bad("pause_writing twice")
        self.writing_paused = True
        self.resumed = self.loop.create_future()

    def resume_writing(self):
        if not self.writing_paused:
            self._bad("resume_writing without pause_writing")
        self.writing_paused = False
        if self.resumed is not None and not self.resumed.done():
            self.resumed.set_result(None)


def _chunk(rng):
    size = rng.choices([rng.randint(1, 100), rng.randint(100, 65536),
                        rng.randint(65536, 256 * 1024)], weights=[40, 45, 15])[0]
    return shaped(rng, rng.randbytes(size))


async def _script(rng, child, stdin, sent):
    for _ in range(rng.randint(3, 40)):
        op = rng.choices(["write", "writelines", "limits", "drain", "pause", "nap", "yield"],
                         weights=[40, 10, 5, 15, 8, 7, 15])[0]
        if op in ("write", "writelines"):
            write_random(rng, stdin, sent, _chunk, lines=op == "writelines")
        elif op == "limits":
            high = rng.choice([0, 1024, 64 * 1024, 1024 * 1024])
            stdin.set_write_buffer_limits(high=high)
        elif op == "drain":
            if child.writing_paused:
                await wait_for(child.resumed, _TIMEOUT)
        elif op == "pause":
            child.pause_out()
            child.loop.call_later(rng.choice([0, 0.002]), child.resume_out)
        elif op == "nap":
            await asyncio.sleep(rng.choice([0.0005, 0.002]))
        else:
            await asyncio.sleep(0)


async def _case(loop, seed):
    rng = random.Random(seed)
    ending = rng.choices(["write_eof", "close", "kill"], weights=[50, 30, 20])[0]
    stderr = rng.choice([subprocess.PIPE, subprocess.DEVNULL])
    child = Child(loop, random.Random(rng.random()))
    transport, _ = await loop.subprocess_exec(
        lambda: child, "cat", stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
    sent = bytearray()
    try:
        stdin = transport.get_pipe_transport(0)
        await _script(rng, child, stdin, sent)
        child.resume_out()
        if ending == "write_eof":
            stdin.write_eof()
        elif ending == "close":
            stdin.close()
        else:
            transport.kill()
        await wait_for(child.lost, _TIMEOUT)
        returncode = transport.get_returncode()
    finally:
        transport.close()
    assert child.errors == []
    out = bytes(child.out)
    if ending == "kill":
        assert bytes(sent).startswith(out)
        # cat may have finished everything before the signal landed.
        assert returncode in (-signal.SIGKILL, 0)
    else:
        assert out == bytes(sent)
        assert returncode == 0
    assert child.err == b""
    assert sorted(child.pipes_lost) == ([0, 1, 2] if stderr == subprocess.PIPE else [0, 1])


@pytest.mark.parametrize("seed", seeds())
def test_random_subprocess_script(loop, seed):
    loop.run_until_complete(_case(loop, seed))
