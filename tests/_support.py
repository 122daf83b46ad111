"""Helpers shared by the behaviour tests (imported as ``_support``)."""

import asyncio
import gc
import importlib
import json
import os
import re
import sys
import warnings

import pytest

# The machine's facts, answered by _platform (re-exported for the tests).
from _platform import RSS_UNKNOWN, build_backends, describe_fd, open_fds, rss_bytes  # noqa: F401

PY = sys.version_info[:2]


def rss_growth(before):
    """Bytes the resident set grew by since ``before`` (an ``rss_bytes()``
    reading); None where the machine tells no current RSS (RSS_UNKNOWN):
    a growth bound then holds nothing to check, and says so by testing
    for None."""
    now = rss_bytes()
    return None if before is None or now is None else now - before


# Modules whose package has another name.
_PACKAGE_OF = {"_cffi_backend": "cffi"}


def _package_key(name):
    return re.sub(r"[-_.]+", "-", _PACKAGE_OF.get(name, name)).lower()


def needs(module, strict=False):
    """``module``, imported. Where it cannot be, because a package the test
    requirements pin could not be installed on this machine
    (ZLOOP_TEST_UNAVAILABLE: tests/_install_requirements.py's lines), the
    test skips, naming the package and why; otherwise it skips pointing at
    tests/requirements.txt, or with ``strict`` fails on the ImportError."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        wanted = {_package_key(n.split(".")[0]) for n in (module, exc.name or module)}
        for line in os.environ.get("ZLOOP_TEST_UNAVAILABLE", "").splitlines():
            if _package_key(re.split(r"[=<>!~;: ]", line.strip(), maxsplit=1)[0]) in wanted:
                pytest.skip(f"{module} needs {line.strip()}")
        if strict:
            raise
        pytest.skip(f"{module} cannot be imported ({exc}): pip install -r tests/requirements.txt")


def describe_fds(fds):
    """``fd -> what`` for each descriptor, for a failure message."""
    return ", ".join(f"{fd} -> {describe_fd(fd)}" for fd in sorted(fds))


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

    trustme = needs("trustme")
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


def loop_modes():
    """Every kind of loop a case that depends on the backend compares, as
    ZLOOP_TEST_LOOPS selects: "asyncio", and zloop on each backend of the
    build ("zloop-epoll", "zloop-io_uring", "zloop-io_uring-shared": the
    ring any thread may enter, "zloop-kqueue")."""
    names = [n.strip() for n in os.environ.get("ZLOOP_TEST_LOOPS", "asyncio,zloop").split(",")]
    modes = ["asyncio"] if "asyncio" in names else []
    if "zloop" in names:
        for backend in build_backends():
            modes.append(f"zloop-{backend}")
            if backend == "io_uring":
                modes.append("zloop-io_uring-shared")
    return modes


def mode_factory(mode, monkeypatch):
    """A factory of loops of ``mode`` (see ``loop_modes``); zloop's read
    the backend from the environment, which ``monkeypatch`` sets for the
    test (and any process it forks)."""
    if mode == "asyncio":
        return asyncio.SelectorEventLoop
    import zloop

    _, backend, *shared = mode.split("-", 2)
    monkeypatch.setenv("ZLOOP_BACKEND", backend)
    if shared:
        monkeypatch.setenv("ZLOOP_URING_OFF", "single_issuer")
    else:
        monkeypatch.delenv("ZLOOP_URING_OFF", raising=False)
    return zloop.new_event_loop


class ForkedChild:
    """A child forked to run ``body()`` (a JSON-able report) and exit,
    never returning into pytest: ``ForkedChild(body)`` forks (from any
    thread, a running loop's callback included), ``report()`` reaps it and
    returns (its exit code, its report)."""

    def __init__(self, body):
        self._r, w = os.pipe()
        with warnings.catch_warnings():
            # 3.12+ warns about forking a process that has threads.
            warnings.simplefilter("ignore", DeprecationWarning)
            self.pid = os.fork()
        if self.pid != 0:
            os.close(w)
            return
        status = 1
        try:
            os.close(self._r)
            os.write(w, json.dumps(body()).encode())
            status = 0
        except BaseException as exc:
            os.write(w, json.dumps({"child error": repr(exc)}).encode())
        finally:
            os._exit(status)

    def report(self):
        chunks = []
        while chunk := os.read(self._r, 65536):
            chunks.append(chunk)
        os.close(self._r)
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status), json.loads(b"".join(chunks) or b"{}")
