"""CPython test_asyncio injection: loop-under-test twins of per-selector classes.

``zloop.testing`` already makes ``asyncio.new_event_loop()`` (and so
``asyncio.run``, ``asyncio.Runner``, ``IsolatedAsyncioTestCase`` and every
``tearDownModule`` that resets the policy) build the loop under test. The
classes below build their loop from a selector class directly, so they never
reach it. For each one, a twin class named ``LoopUnderTest_<name>`` is added to
its module before pytest collects it: the same tests, with ``create_event_loop``
or ``new_loop`` returning the loop under test. On the asyncio baseline the twin
builds asyncio's default loop, so the names line up and the twin is diffed test
by test. The original classes still run, on the selector loops they name, in
both runs. No file of the stdlib is edited.

``test_events``, ``test_sendfile`` and ``test_sock_lowlevel`` have a class per
selector, defined only where the machine has that selector: the twin is made
from the one of this machine's default selector (``selectors.DefaultSelector``,
the one asyncio's default loop uses), so ``LoopUnderTest_EPollEventLoopTests``
on Linux, ``LoopUnderTest_KqueueEventLoopTests`` on macOS and FreeBSD,
``LoopUnderTest_PollEventLoopTests`` where neither exists (Linux with
``select.epoll`` hidden, as the kqueue lane of ``scripts/test`` runs it).
Expected differences name them ``LoopUnderTest_*EventLoopTests``.
"""

from __future__ import annotations

import selectors
import sys
import unittest

import pytest

# The per-selector class of test_events, test_sendfile and
# test_sock_lowlevel for each default selector asyncio may pick.
_SELECTOR_CLASSES = {
    "EpollSelector": "EPollEventLoopTests",
    "KqueueSelector": "KqueueEventLoopTests",
    "DevpollSelector": "PollEventLoopTests",  # Solaris: no class of its own
    "PollSelector": "PollEventLoopTests",
    "SelectSelector": "SelectEventLoopTests",
}


def default_selector_class() -> str:
    """The per-selector test class that matches asyncio's default loop here."""
    return _SELECTOR_CLASSES.get(selectors.DefaultSelector.__name__, "SelectEventLoopTests")


def twins() -> dict[str, tuple[tuple[str, ...], str]]:
    """module -> (class names, the method that builds the loop)."""
    per_selector = (default_selector_class(),)
    return {
        "test.test_asyncio.test_events": (per_selector, "create_event_loop"),
        "test.test_asyncio.test_sendfile": (per_selector, "create_event_loop"),
        "test.test_asyncio.test_sock_lowlevel": (per_selector, "create_event_loop"),
        "test.test_asyncio.test_server": (("SelectorStartServerTests",), "new_loop"),
        "test.test_asyncio.test_sslproto": (("SelectorStartTLSTests",), "new_loop"),
        "test.test_asyncio.test_buffered_proto": (("BufferedProtocolSelectorTests",), "new_loop"),
    }


PREFIX = "LoopUnderTest_"


def _testing():
    return sys.modules.get("zloop.testing") or sys.modules["zloop_testing"]


def add_twins(module: object, factory) -> list[str]:
    """Add the twin classes to a test module; return their names."""
    names, method = twins().get(getattr(module, "__name__", ""), ((), ""))
    added = []
    for name in names:
        base = getattr(module, name, None)
        if not (isinstance(base, type) and issubclass(base, unittest.TestCase)):
            continue  # absent on this Python or platform
        twin_name = PREFIX + name

        def build_loop(self, _factory=factory):
            return _factory()

        twin = type(twin_name, (base,), {method: build_loop, "__module__": module.__name__,
                                         "__qualname__": twin_name})
        setattr(module, twin_name, twin)
        added.append(twin_name)
    return added


@pytest.hookimpl(tryfirst=True)
def pytest_collectstart(collector: pytest.Collector) -> None:
    if not isinstance(collector, pytest.Module):
        return
    try:
        module = collector.obj  # imports the module; pytest reports errors itself
    except Exception:
        return
    factory = _testing().chosen_factory(collector.config)
    add_twins(module, factory)
