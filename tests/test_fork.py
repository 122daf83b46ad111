"""os.fork() from inside a running loop.

Stock asyncio: the child must not see the parent's running loop.  3.11 gets
this from a pid check in get_running_loop(); 3.12+ from an
os.register_at_fork hook that also clears signal.set_wakeup_fd.  Either way
asyncio.get_running_loop() raises in the child, and the child can make and
run a new loop of its own.
"""

import asyncio
import os
import signal
import socket
import warnings

import pytest

from _support import PY, ForkedChild


def _child_report(loop_factory, parent_loop):
    report = {}
    try:
        asyncio.get_running_loop()
        report["get_running_loop"] = "returned a loop"
    except RuntimeError as exc:
        report["get_running_loop"] = str(exc)
    report["_get_running_loop is None"] = asyncio._get_running_loop() is None
    report["wakeup_fd"] = signal.set_wakeup_fd(-1)
    child_loop = loop_factory()
    try:
        report["child_run"] = child_loop.run_until_complete(
            asyncio.sleep(0.001, result="ran")
        )
    finally:
        child_loop.close()
    report["parent_loop is_running"] = parent_loop.is_running()
    return report


def _fork_from_loop(loop, loop_factory, body):
    """Fork inside a running loop; return (child exit status, child's report)."""

    async def main():
        return ForkedChild(lambda: body(loop_factory, loop))

    return loop.run_until_complete(main()).report()


def test_child_sees_no_running_loop_and_can_run_its_own(loop, loop_factory):
    loop.add_signal_handler(signal.SIGUSR1, lambda: None)  # sets a wakeup fd
    code, report = _fork_from_loop(loop, loop_factory, _child_report)
    assert code == 0, report
    assert report["get_running_loop"] == "no running event loop"
    assert report["_get_running_loop is None"] is True
    assert report["child_run"] == "ran"
    if PY >= (3, 12):
        # asyncio's at-fork hook clears the wakeup fd in the child.
        assert report["wakeup_fd"] == -1


def test_parent_loop_keeps_working_after_a_child_exits(loop, loop_factory):
    a, b = socket.socketpair()
    try:
        got = []

        def on_readable():
            got.append(a.recv(10))
            loop.stop()

        loop.add_reader(a.fileno(), on_readable)
        code, report = _fork_from_loop(loop, loop_factory, lambda f, lp: {"ok": True})
        assert (code, report) == (0, {"ok": True})
        b.send(b"after")
        loop.run_forever()
        assert got == [b"after"]
        assert loop.run_until_complete(asyncio.sleep(0.001, result=1)) == 1
    finally:
        a.close()
        b.close()


@pytest.mark.skipif(PY < (3, 12), reason="the at-fork hook is new in 3.12")
def test_child_forked_outside_a_loop_has_no_wakeup_fd(loop):
    loop.add_signal_handler(signal.SIGUSR1, lambda: None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        os._exit(0 if signal.set_wakeup_fd(-1) == -1 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
