"""Helpers shared by the behaviour tests (imported as ``_support``)."""

import asyncio
import gc
import os
import sys
import warnings

import pytest

PY = sys.version_info[:2]


def build_backends():
    """The backends of the zloop build under test, its default first:
    epoll and io_uring, or epoll and kqueue (emulated) on a portable Linux
    build. When zloop cannot be imported, the default build's: the cases
    then fail on the import, as every zloop case does."""
    try:
        from zloop._zloop import BACKENDS
    except ImportError:
        return ("epoll", "io_uring")
    return tuple(BACKENDS)


def open_fds():
    """The set of this process's open file descriptors."""
    return set(int(name) for name in os.listdir("/proc/self/fd"))


def describe_fds(fds):
    """``fd -> target`` for each descriptor, for a failure message."""
    out = []
    for fd in sorted(fds):
        try:
            out.append(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            out.append(f"{fd} -> ?")
    return ", ".join(out)


@pytest.fixture(autouse=True)
def no_leaks():
    """No descriptor outlives a test, and no ResourceWarning is raised.

    Autouse in the modules that import it (it is set up before the
    ``loop`` fixture, and checks after that loop has been closed).
    """
    gc.collect()
    before = open_fds()
    yield
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == []
    leaked = open_fds() - before
    assert not leaked, f"leaked descriptors: {describe_fds(leaked)}"


def rss_bytes():
    """Resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def run_passes(loop, count):
    """Run ``count`` passes of a loop that is not running, then return.

    Each pass is one call_soon hop, so ``count`` hops give the loop at least
    that many iterations (I/O polls included) without any timer.
    """
    assert count >= 1

    def hop(left):
        if left == 0:
            loop.stop()
        else:
            loop.call_soon(hop, left - 1)

    loop.call_soon(hop, count - 1)
    loop.run_forever()


async def yield_passes(count):
    """From inside a coroutine, let the loop run ``count`` more passes."""
    for _ in range(count):
        await asyncio.sleep(0)


def stock_handle_repr(callback, args, *, when=None, cancelled=False):
    """repr() of the Handle/TimerHandle stock asyncio makes for these inputs.

    Built on a throwaway stock loop, so the expected text follows whatever
    this Python's asyncio prints (3.13 hides arguments outside debug mode).
Debug mode is off: in debug mode the repr names where the handle was made.
    """
    ref = asyncio.SelectorEventLoop()
    try:
        if when is None:
            handle = asyncio.Handle(callback, args, ref)
        else:
            handle = asyncio.TimerHandle(when, callback, args, ref)
        if cancelled:
            handle.cancel()
        return repr(handle)
    finally:
        ref.close()


def short_writes_sslobject_class(most=1000):
    """An ``ssl.SSLObject`` subclass whose ``write()`` takes at most
    ``most`` bytes, as an SSL_write in partial-write mode may (for a
    context's ``sslobject_class``)."""
    import ssl

    class ShortWritesSSLObject(ssl.SSLObject):
        def write(self, data):
            return super().write(memoryview(data).cast("B")[:most])

    return ShortWritesSSLObject


def tls_certificate(host="127.0.0.1"):
    """A throwaway CA's server certificate (trustme) naming ``localhost``
    and ``host``, and a client context trusting that CA. Skips the test
    without trustme."""
    import ssl

    trustme = pytest.importorskip("trustme", reason="pip install -r tests/requirements.txt")
    ca = trustme.CA()
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    return ca.issue_cert("localhost", host), client_ctx


def tls_contexts(host="127.0.0.1"):
    """``(server_ctx, client_ctx)`` for `tls_certificate`'s certificate."""
    import ssl

    cert, client_ctx = tls_certificate(host)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    return server_ctx, client_ctx


class ExportsOnce:
    """A writable buffer whose second export fails: the first is a call's
    direct attempt, the second its attempt once the socket is ready."""

    def __init__(self, size=16):
        self.exports = 0
        self.data = bytearray(size)

    def __buffer__(self, flags):
        self.exports += 1
        if self.exports > 1:
            raise BufferError("gone")
        return memoryview(self.data)
