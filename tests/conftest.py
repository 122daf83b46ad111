"""Fixtures that run every behaviour test on each loop in ZLOOP_TEST_LOOPS.

ZLOOP_TEST_LOOPS is a comma-separated list of loop names (default
"asyncio,zloop").  "asyncio" is stock asyncio's selector loop; "zloop" is
``zloop.new_event_loop``.  Each test that takes the ``loop`` or
``loop_factory`` fixture runs once per name, with the name as its id.

If zloop is requested but cannot be imported, its cases FAIL with the import
error (they must not skip: a broken build is a red run, not a quiet one).
"""

import asyncio
import faulthandler
import getpass
import os
import shutil
import tempfile

import pytest

import _platform

_KNOWN_LOOPS = ("asyncio", "zloop")
LOOP_NAMES = tuple(
    name.strip()
    for name in os.environ.get("ZLOOP_TEST_LOOPS", "asyncio,zloop").split(",")
    if name.strip()
)

# Seconds after which a test stuck where pytest-timeout's SIGALRM cannot
# reach it (native code that never returns to the interpreter) dumps every
# thread's stack and ends the run.  Well above the ini's per-test timeout.
_HARD_TIMEOUT_S = 90


def pytest_configure(config):
    unknown = [name for name in LOOP_NAMES if name not in _KNOWN_LOOPS]
    if unknown or not LOOP_NAMES:
        raise pytest.UsageError(
            f"ZLOOP_TEST_LOOPS={os.environ.get('ZLOOP_TEST_LOOPS')!r}: "
            f"expected a comma-separated subset of {_KNOWN_LOOPS}"
        )
    _short_basetemp(config)


def _short_basetemp(config):
    """Tests bind AF_UNIX sockets under tmp_path. pytest's own temporary
    root, under a long $TMPDIR (macOS: /var/folders/.../T/), would not
    leave room for them in sun_path: there, tmp_path lives in a short
    directory under /tmp instead, removed when the run ends."""
    if config.option.basetemp is not None:
        return
    # pytest's <tmp>/pytest-of-<user>/pytest-<n>/<test name, 30 + 1>/<name>.
    user = getpass.getuser()
    deepest = len(tempfile.gettempdir()) + len("/pytest-of-") + len(user) + 12 + 32 + 16
    if deepest <= _platform.unix_path_max():
        return
    config.option.basetemp = _platform.short_temp_dir()
    config.add_cleanup(lambda: shutil.rmtree(config.option.basetemp, ignore_errors=True))


def pytest_report_header(config):
    return f"loops under test: {', '.join(LOOP_NAMES)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    faulthandler.dump_traceback_later(_HARD_TIMEOUT_S, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    # Turn a zloop import error recorded at setup into a failure of the test
    # itself, so it is counted as failed (not as a setup error, not skipped).
    exc = getattr(item, "_zloop_import_error", None)
    if exc is not None:
        pytest.fail(
            f"zloop is not importable: {type(exc).__name__}: {exc}", pytrace=False
        )


def _import_zloop(request):
    """Return the zloop module, or None after recording why it failed."""
    try:
        import zloop

        # An empty zloop/ directory imports as a namespace package: that is
        # not a usable zloop either.
        zloop.new_event_loop
    except Exception as exc:  # ImportError, or an error inside the package
        request.node._zloop_import_error = exc
        return None
    return zloop


class _ZloopUnavailable:
    """Stands in for a factory when zloop failed to import; never called."""

    def __call__(self, *args, **kwargs):
        raise RuntimeError("zloop is not importable")


@pytest.fixture(params=LOOP_NAMES)
def loop_name(request):
    """The id of the loop under test: "asyncio" or "zloop"."""
    return request.param


@pytest.fixture
def loop_factory(request, loop_name):
    """A zero-argument callable that makes a new, not running event loop."""
    if loop_name == "asyncio":
        # Not asyncio.new_event_loop(): that goes through the global policy,
        # which a zloop.install() test could have changed.
        return asyncio.SelectorEventLoop
    zloop = _import_zloop(request)
    if zloop is None:
        return _ZloopUnavailable()
    return zloop.new_event_loop


@pytest.fixture
def loop(request, loop_factory):
    """A fresh loop of the kind under test, closed after the test."""
    if isinstance(loop_factory, _ZloopUnavailable):
        yield None
        return
    lp = loop_factory()
    try:
        yield lp
    finally:
        close_loop(lp)


@pytest.fixture
def zloop_module(request):
    """The zloop module, for tests of zloop's own API (mark them zloop_only)."""
    if "zloop" not in LOOP_NAMES:
        pytest.skip("zloop is not in ZLOOP_TEST_LOOPS")
    return _import_zloop(request)


def close_loop(lp):
    """Close a loop whatever state the test left it in (but not running)."""
    assert not lp.is_running(), "loop still running at teardown"
    lp.close()
    # No gc.collect() here: with the TLS libraries loaded it costs ~0.1 s a
    # test.  The leak tests collect where they need to.


@pytest.fixture
def run(loop):
    """run(coro) -> result, on the loop under test."""

    def run_coro(coro):
        return loop.run_until_complete(coro)

    return run_coro


def pytest_collection_modifyitems(config, items):
    del config
    for item in items:
        if item.get_closest_marker("zloop_only") and "zloop" not in LOOP_NAMES:
            item.add_marker(pytest.mark.skip(reason="zloop is not in ZLOOP_TEST_LOOPS"))
