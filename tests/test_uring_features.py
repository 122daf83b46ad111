"""io_uring's optional ring features and its fallbacks.

zloop's io_uring backend detects each optional ring feature when it sets up
a ring, with a fallback for each; ``ZLOOP_URING_OFF`` (comma-separated
feature names) turns any of them off, so that each fallback runs here on a
kernel that has them all. ``loop._backend_features`` tells which are in
use. A kernel or a seccomp profile that refuses io_uring altogether gives
the loop epoll.

The behaviour cases run on both loops: stock asyncio runs the same
scenario (it ignores both variables) and must give the same outcome.
"""

import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from _support import build_backends

# The names ZLOOP_URING_OFF takes, as loop._backend_features reports them.
FEATURES = ("single_issuer", "coop_taskrun", "recv", "epoll_wait")

needs_io_uring = pytest.mark.skipif(
    "io_uring" not in build_backends(), reason="this zloop build has no io_uring backend"
)


class _Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


async def _scenario():
    """An echo over TCP (native receives on io_uring), a borrowed socket
    (sock_* calls: the epoll the ring waits on), timers, and callbacks
    posted from another thread; returns what each gave, and the backend's
    features as the run sees them (None on asyncio)."""
    loop = asyncio.get_running_loop()
    seen = {"features": getattr(loop, "_backend_features", None)}
    server = await loop.create_server(_Echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    echoed = []
    for size in (1, 1000, 100_000):
        writer.write(b"x" * size)
        echoed.append(len(await reader.readexactly(size)))
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()
    seen["echo"] = echoed

    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    with a, b:
        await loop.sock_sendall(a, b"borrowed")
        seen["sock"] = await loop.sock_recv(b, 100)

    fired = []
    for delay, name in ((0.03, "late"), (0.01, "early"), (0.02, "middle")):
        loop.call_later(delay, fired.append, name)
    await asyncio.sleep(0.05)
    seen["timers"] = fired

    posted = []
    done = loop.create_future()

    def post():
        for i in range(100):
            loop.call_soon_threadsafe(posted.append, i)
        loop.call_soon_threadsafe(done.set_result, "posted")

    thread = threading.Thread(target=post)
    thread.start()
    seen["threadsafe"] = await done
    thread.join()
    seen["posted"] = posted
    return seen


_EXPECTED = {
    "echo": [1, 1000, 100_000],
    "sock": b"borrowed",
    "timers": ["early", "middle", "late"],
    "threadsafe": "posted",
    "posted": list(range(100)),
}


def _io_uring_env(monkeypatch, off):
    if "io_uring" in build_backends():
        monkeypatch.setenv("ZLOOP_BACKEND", "io_uring")
    monkeypatch.setenv("ZLOOP_URING_OFF", off)


@pytest.mark.parametrize("off", ["", *FEATURES, ",".join(FEATURES)])
def test_echo_timers_and_threadsafe_calls_with_a_ring_feature_off(loop_factory, monkeypatch, off):
    _io_uring_env(monkeypatch, off)
    lp = loop_factory()
    try:
        seen = lp.run_until_complete(_scenario())
        features = seen.pop("features")
        assert seen == _EXPECTED
        if features is not None and lp.backend == "io_uring":
            assert set(features) <= set(FEATURES)
            assert not set(off.split(",")) & set(features), (off, features)
    finally:
        lp.close()


@pytest.mark.parametrize("off", ["", "recv"])
def test_a_loop_made_in_one_thread_runs_in_another_and_closes_in_the_first(
    loop_factory, monkeypatch, off
):
    # A single-issuer ring lets only its creator in: the worker's first pass
    # moves the loop to a ring any thread may enter, and the creator can
    # close it after.
    _io_uring_env(monkeypatch, off)
    lp = loop_factory()
    results = {}

    def worker():
        try:
            results["worker"] = lp.run_until_complete(_scenario())
        except BaseException as exc:  # reported by the assertion below
            results["worker"] = exc

    try:
        # A first run here, then one in the worker, then one here again.
        assert lp.run_until_complete(asyncio.sleep(0, "here")) == "here"
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        seen = results["worker"]
        assert not isinstance(seen, BaseException), seen
        features = seen.pop("features")
        assert seen == _EXPECTED
        if features is not None and lp.backend == "io_uring":
            assert "single_issuer" not in features  # moved
        again = lp.run_until_complete(_scenario())
        again.pop("features")
        assert again == _EXPECTED
    finally:
        lp.close()


@pytest.mark.zloop_only
@needs_io_uring
def test_features_in_use_are_reported_and_each_can_be_turned_off(zloop_module, monkeypatch):
    async def during_run():
        return asyncio.get_running_loop()._backend_features

    monkeypatch.setenv("ZLOOP_BACKEND", "io_uring")
    for off in ["", *FEATURES]:
        monkeypatch.setenv("ZLOOP_URING_OFF", off)
        lp = zloop_module.new_event_loop()
        try:
            in_run = lp.run_until_complete(during_run())
            assert lp.backend == "io_uring"
            assert isinstance(in_run, tuple) and set(in_run) <= set(FEATURES)
            assert off not in in_run
            assert lp._backend_features == in_run
        finally:
            lp.close()
    monkeypatch.setenv("ZLOOP_BACKEND", "epoll")
    lp = zloop_module.new_event_loop()
    try:
        assert lp._backend_features == ()
    finally:
        lp.close()


@pytest.mark.zloop_only
@needs_io_uring
def test_a_name_that_is_no_feature_is_refused(zloop_module, monkeypatch):
    monkeypatch.setenv("ZLOOP_BACKEND", "io_uring")
    monkeypatch.setenv("ZLOOP_URING_OFF", "recv,single_isuer")
    with pytest.raises(OSError) as info:
        zloop_module.new_event_loop()
    assert info.value.errno == 22  # EINVAL, as a misspelt name must not pass quietly


# ------------------------------------------------------------- no io_uring

# A child that installs a seccomp filter making io_uring_setup, _enter and
# _register (425-427 on x86_64 and aarch64) fail with the given errno, as
# container runtimes' default profiles do, then reports what a loop runs on.
_REFUSED_CHILD = textwrap.dedent(
    """
    import asyncio, ctypes, json, os, struct, sys

    errno_value = int(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    RET_ERRNO, RET_ALLOW = 0x00050000, 0x7FFF0000
    LD_W_ABS, JGE_K, JGT_K, RET_K = 0x20, 0x35, 0x25, 0x06

    def insn(code, jt, jf, k):
        return struct.pack("HBBI", code, jt, jf, k)

    prog = b"".join([
        insn(LD_W_ABS, 0, 0, 0),  # the syscall number
        insn(JGE_K, 0, 2, 425),
        insn(JGT_K, 1, 0, 427),
        insn(RET_K, 0, 0, RET_ERRNO | errno_value),
        insn(RET_K, 0, 0, RET_ALLOW),
    ])
    filters = ctypes.create_string_buffer(prog)
    fprog = struct.pack("HxxxxxxP", len(prog) // 8, ctypes.addressof(filters))
    fprog_buf = ctypes.create_string_buffer(fprog)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog_buf, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")

    import logging
    said = []

    class Said(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())

    logging.getLogger("asyncio").addHandler(Said())
    logging.getLogger("asyncio").setLevel(logging.DEBUG)

    import zloop

    async def main():
        loop = asyncio.get_running_loop()
        got = loop.create_future()
        loop.call_later(0.01, got.set_result, "timer")
        a, b = __import__("socket").socketpair()
        with a, b:
            a.setblocking(False)
            b.setblocking(False)
            await loop.sock_sendall(a, b"ping")
            data = await loop.sock_recv(b, 10)
        return [await got, data.decode()]

    loop = zloop.new_event_loop()
    try:
        result = loop.run_until_complete(main())
        zloop.new_event_loop().close()  # a second loop: said once a process
        print(json.dumps({
            "asked": zloop.BACKEND,
            "backend": loop.backend,
            "features": list(loop._backend_features),
            "result": result,
            "said": [m for m in said if "io_uring" in m],
        }))
    finally:
        loop.close()
    """
)


@pytest.mark.zloop_only
@needs_io_uring
@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64"),
    reason="the filter names io_uring's syscall numbers on x86_64 and aarch64",
)
@pytest.mark.parametrize("refusal", ["EPERM", "ENOSYS"])
@pytest.mark.parametrize("asked", ["io_uring", ""])
def test_io_uring_refused_by_seccomp_falls_back_to_epoll(zloop_module, refusal, asked, tmp_path):
    import errno

    env = dict(os.environ, ZLOOP_BACKEND=asked)
    env.pop("ZLOOP_URING_OFF", None)
    root = os.path.dirname(os.path.dirname(os.path.abspath(zloop_module.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", _REFUSED_CHILD, str(getattr(errno, refusal))],
        capture_output=True, text=True, timeout=60, env=env,
        cwd=tmp_path,  # not the checkout's root, whose zloop/ has no extension in tox
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report == {
        "asked": asked or "epoll",
        "backend": "epoll",  # what the loop runs on, whatever was asked
        "features": [],
        "result": ["timer", "ping"],
        # The debug line, once, where io_uring was asked for.
        "said": [
            "zloop: ZLOOP_BACKEND asks for io_uring, which this kernel refuses (too old, "
            "a seccomp profile, or the io_uring_disabled sysctl): loops run on epoll"
        ] if asked else [],
    }
