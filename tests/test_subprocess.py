"""subprocess_exec / subprocess_shell and asyncio.create_subprocess_*
(issue 4), each case on stock asyncio and on zloop side by side."""

import asyncio
import gc
import os
import signal
import subprocess
import sys
import warnings

import pytest
from _platform import child_pids, exited_child_watch_refused, open_fds

PY = sys.executable
PIPE = asyncio.subprocess.PIPE


def _fds():
    return len(open_fds())


def _multiprocessing_helpers():
    """Pids of multiprocessing's long-lived helper processes: from 3.14 on,
    the first process pool (forkserver by default) starts a resource tracker
    that lives until the interpreter exits, whichever test made the pool."""
    pids = set()
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    if tracker is not None:
        pids.add(getattr(tracker._resource_tracker, "_pid", None))
    forkserver = sys.modules.get("multiprocessing.forkserver")
    if forkserver is not None:
        pids.add(getattr(forkserver._forkserver, "_forkserver_pid", None))
    return pids


def _children():
    """Pids of this process's children, zombies included (multiprocessing's
    helpers left out; see _platform.child_pids for what a machine without
    /proc or ps shows)."""
    return child_pids(leave_out=_multiprocessing_helpers())


def test_communicate_large_payloads_both_ways(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            PY,
            "-c",
            "import sys; d = sys.stdin.buffer.read(); sys.stdout.buffer.write(d[::-1]);"
            " sys.stderr.buffer.write(d[:1000])",
            stdin=PIPE,
            stdout=PIPE,
            stderr=PIPE,
        )
        data = os.urandom(3 << 19)
        out, err = await proc.communicate(data)
        assert out == data[::-1]
        assert err == data[:1000]
        assert proc.returncode == 0

    run(main())


def test_returncode_wait_and_shell(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_shell("exit 7")
        assert await proc.wait() == 7
        assert proc.returncode == 7
        assert await proc.wait() == 7
        proc = await asyncio.create_subprocess_shell("echo $((6*7))", stdout=PIPE)
        out, err = await proc.communicate()
        assert (out, err) == (b"42\n", None)

    run(main())


def test_devnull_stdout_to_stderr_and_existing_fds(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            PY, "-c", "print('out'); import sys; print('err', file=sys.stderr)",
            stdout=PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        out, _ = await proc.communicate()
        assert sorted(out.split()) == [b"err", b"out"]
        r, w = os.pipe()
        proc = await asyncio.create_subprocess_exec(
            "echo", "into a fd", stdout=w, stderr=subprocess.DEVNULL
        )
        os.close(w)
        assert await proc.wait() == 0
        assert os.read(r, 100) == b"into a fd\n"
        os.close(r)

    run(main())


def test_signals(loop, run):
    async def main():
        for how, sig in (("terminate", signal.SIGTERM), ("kill", signal.SIGKILL)):
            proc = await asyncio.create_subprocess_exec("sleep", "30")
            getattr(proc, how)()
            assert await proc.wait() == -sig
        proc = await asyncio.create_subprocess_exec(
            PY, "-c", "import signal,sys,time; signal.signal(signal.SIGUSR1, lambda *a: sys.exit(5));"
            " print('ready', flush=True); time.sleep(30)", stdout=PIPE,
        )
        assert await proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGUSR1)
        assert await proc.wait() == 5
        # Signalling a child that is gone (transport finished): ProcessLookupError.
        proc = await asyncio.create_subprocess_exec("true")
        assert await proc.wait() == 0
        # wait() may return a pass before the transport finishes (asyncio,
        # when the exit is seen before the pipes are connected).
        for _ in range(3):
            await asyncio.sleep(0)
        with pytest.raises(ProcessLookupError):
            proc.kill()

    run(main())


def test_transport_api(loop, run):
    async def main():
        exited = loop.create_future()
        lost = loop.create_future()

        class Proto(asyncio.SubprocessProtocol):
            def __init__(self):
                self.data = []

            def pipe_data_received(self, fd, data):
                self.data.append((fd, data))

            def process_exited(self):
                exited.set_result(None)

            def connection_lost(self, exc):
                lost.set_result(exc)

        t, p = await loop.subprocess_exec(Proto, PY, "-c", "print('hi')", stdin=None)
        assert isinstance(t, asyncio.SubprocessTransport)
        assert t.get_pid() > 0
        assert isinstance(t.get_extra_info("subprocess"), subprocess.Popen)
        assert t.get_pipe_transport(0) is None
        assert isinstance(t.get_pipe_transport(1), asyncio.ReadTransport)
        await exited
        assert await lost is None
        assert t.get_returncode() == 0
        assert {fd for fd, _ in p.data} == {1}
        assert b"".join(d for _, d in p.data) == b"hi\n"
        t.close()
        assert "pid=" in repr(t)

    run(main())


def test_argument_errors(loop, run):
    async def main():
        P = asyncio.SubprocessProtocol
        with pytest.raises(ValueError, match="shell must be False"):
            await loop.subprocess_exec(P, "true", shell=True)
        with pytest.raises(ValueError, match="shell must be True"):
            await loop.subprocess_shell(P, "true", shell=False)
        with pytest.raises(ValueError, match="cmd must be a string"):
            await loop.subprocess_shell(P, ["true"])
        with pytest.raises(ValueError, match="bufsize must be 0"):
            await loop.subprocess_exec(P, "true", bufsize=1)
        with pytest.raises(ValueError, match="universal_newlines must be False"):
            await loop.subprocess_exec(P, "true", universal_newlines=True)
        with pytest.raises(ValueError, match="text must be False"):
            await loop.subprocess_exec(P, "true", text=True)
        with pytest.raises(ValueError, match="encoding must be None"):
            await loop.subprocess_exec(P, "true", encoding="utf-8")
        with pytest.raises(FileNotFoundError):
            await asyncio.create_subprocess_exec("/nonexistent/program")

    gc.collect()
    before = _fds()
    run(main())
    assert _fds() == before


def test_preexec_fn_and_sessions(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            PY, "-c", "import os; print(os.getsid(0) == os.getpid())",
            stdout=PIPE, start_new_session=True,
        )
        assert (await proc.communicate())[0] == b"True\n"
        proc = await asyncio.create_subprocess_exec(
            PY, "-c", "import os; print(os.environ['ZL'])",
            stdout=PIPE, preexec_fn=lambda: os.environ.__setitem__("ZL", "pre"),
        )
        assert (await proc.communicate())[0] == b"pre\n"
        if sys.version_info >= (3, 11):
            proc = await asyncio.create_subprocess_exec(
                PY, "-c", "import os; print(os.getpgid(0) == os.getpid())",
                stdout=PIPE, process_group=0,
            )
            assert (await proc.communicate())[0] == b"True\n"

    run(main())


def test_a_hundred_concurrent_children(loop, run):
    async def one(i):
        proc = await asyncio.create_subprocess_exec(
            "sh", "-c", f"read x; echo $x-{i}", stdin=PIPE, stdout=PIPE
        )
        out, _ = await proc.communicate(b"child")
        return out, proc.returncode

    async def main():
        return await asyncio.gather(*(one(i) for i in range(100)))

    gc.collect()
    before = _fds()
    results = run(main())
    assert results == [(f"child-{i}\n".encode(), 0) for i in range(100)]
    assert _fds() == before
    assert _children() == []


def test_cancelled_wait_leaves_the_child_running(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec("sleep", "30")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), 0.05)
        assert proc.returncode is None
        proc.kill()
        assert await proc.wait() == -signal.SIGKILL

    run(main())


def test_cancelled_communicate(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec("sleep", "30", stdout=PIPE, stdin=PIPE)
        task = asyncio.ensure_future(proc.communicate(b"x"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        proc.kill()
        await proc.wait()

    gc.collect()
    before = _fds()
    run(main())
    gc.collect()
    assert _fds() == before
    assert _children() == []


def test_closing_the_loop_with_live_children(loop_factory):
    if loop_factory is asyncio.SelectorEventLoop:
        pytest.skip("stock asyncio leaves the child and its pipes to the garbage collector")
    gc.collect()
    before = _fds()
    lp = loop_factory()

    async def main():
        return [
            await asyncio.create_subprocess_exec("sleep", "30", stdin=PIPE, stdout=PIPE, stderr=PIPE)
            for _ in range(5)
        ]

    procs = lp.run_until_complete(main())
    lp.close()
    assert [p.returncode for p in procs] == [-signal.SIGKILL] * 5
    assert _children() == []
    with warnings.catch_warnings():
        # The streams' writers warn that their loop is closed, as asyncio's do.
        warnings.simplefilter("ignore", ResourceWarning)
        del procs
        gc.collect()
    assert _fds() == before


class _WaitpidSpy:
    """Stands in for os.waitpid for one child: ``effect(pid, options)``
    answers for it; other pids go to the real waitpid. ``called`` resolves
    on the first call (from the loop, or from a stock watcher's thread)."""

    def __init__(self, loop, pid, effect):
        self.real = os.waitpid
        self.loop, self.pid, self.effect = loop, pid, effect
        self.calls = 0
        self.called = loop.create_future()

    def __call__(self, pid, options):
        if pid != self.pid:
            return self.real(pid, options)
        self.calls += 1
        if self.calls == 1:
            self.loop.call_soon_threadsafe(self.called.set_result, None)
        return self.effect(pid, options)


# 3.11's stock watcher is a thread already blocked in the real waitpid when
# the tests patch it.
_STOCK_WAITS_IN_A_THREAD = pytest.mark.skipif(sys.version_info < (3, 12), reason="3.11's stock watcher waits in a thread")


@_STOCK_WAITS_IN_A_THREAD
def test_child_reaped_elsewhere_reports_255(loop, run, monkeypatch, caplog):
    def reap_then_echild(pid, options):
        spy.real(pid, 0)  # someone else collected the status
        raise ChildProcessError(10, "No child processes")

    async def main():
        nonlocal spy
        proc = await asyncio.create_subprocess_exec(PY, "-c", "import sys; sys.stdin.read()", stdin=PIPE)
        spy = _WaitpidSpy(asyncio.get_running_loop(), proc.pid, reap_then_echild)
        monkeypatch.setattr(os, "waitpid", spy)
        proc.stdin.close()
        assert await proc.wait() == 255
        assert spy.calls == 1

    spy = None
    run(main())
    assert "will report returncode 255" in caplog.text
    assert _children() == []


@_STOCK_WAITS_IN_A_THREAD
def test_waitpid_error_is_reported_without_spinning(loop, run, monkeypatch):
    errors = []
    loop.set_exception_handler(lambda lp, context: errors.append(context.get("exception")))

    def fail(pid, options):
        raise OSError(5, "unexpected")

    async def main():
        before = _fds()
        proc = await asyncio.create_subprocess_exec(PY, "-c", "import sys; sys.stdin.read()", stdin=PIPE)
        spy = _WaitpidSpy(asyncio.get_running_loop(), proc.pid, fail)
        monkeypatch.setattr(os, "waitpid", spy)
        proc.stdin.close()
        await spy.called
        for _ in range(20):  # a still-watched pidfd would call again
            await asyncio.sleep(0)
        monkeypatch.undo()
        assert spy.calls == 1
        assert proc.returncode is None  # the exit is never heard
        os.waitpid(proc.pid, 0)
        await asyncio.sleep(0)
        if sys.version_info >= (3, 14):  # older stock watchers leak the pidfd
            assert _fds() == before
        return proc

    proc = run(main())
    assert [type(e) for e in errors] == [OSError]
    proc._transport.close()


def test_an_exit_heard_before_its_status_is_there_is_waited_for_without_spinning(
        loop, loop_name, run, monkeypatch):
    # XNU posts NOTE_EXIT before the child turns zombie (kern_exit.c
    # proc_exit: proc_knote(p, NOTE_EXIT) comes before p->p_stat = SZOMB),
    # and EVFILT_PROC no longer finds it then (ESRCH): for a moment after
    # the exit is heard, waitpid(WNOHANG) says 0. Made here by a waitpid
    # that says so for _NOT_YET_S of the loop's clock from its first answer
    # for the child. The loop asks again a few times, on a timer that backs
    # off: not once a pass, which would spin it for the whole moment.
    # Stock asyncio's watchers wait without WNOHANG: they never see a 0.
    real = os.waitpid
    first, zeros = [], []

    def not_there_yet(pid, options):
        if not options & os.WNOHANG:
            return real(pid, options)
        now = loop.time()
        if not first:
            first.append(now)
        if now < first[0] + _NOT_YET_S:
            zeros.append(now)
            return 0, 0
        return real(pid, options)

    async def main():
        child = "import sys; sys.stdin.read(); sys.exit(3)"
        proc = await asyncio.create_subprocess_exec(PY, "-c", child, stdin=PIPE)
        monkeypatch.setattr(os, "waitpid", not_there_yet)
        proc.stdin.close()
        return await proc.wait()

    assert run(main()) == 3
    assert len(zeros) <= 20, f"{len(zeros)} attempts in {_NOT_YET_S} s"
    if loop_name == "zloop":
        # The path ran: the exit was heard early, then asked again later.
        print(f"zloop: {len(zeros)} waitpid attempts while no status ({_NOT_YET_S} s)")
        assert len(zeros) >= 2


_NOT_YET_S = 0.2

# os.waitid leaves an exited child unreaped (WNOWAIT); CPython has it on
# macOS from 3.13 on.
_WAITID = pytest.mark.skipif(not hasattr(os, "waitid"), reason="no os.waitid (macOS before 3.13)")


@_WAITID
def test_a_child_that_exits_before_it_is_watched(loop, run, monkeypatch):
    # macOS refuses EVFILT_PROC for a child that has exited, reaped or not
    # (ESRCH); FreeBSD's kqueue and Linux's pidfds report its exit at once.
    # Here every child has exited (unreaped: waitid with WNOWAIT) by the
    # time Popen returns, before the loop can watch it.
    class ExitedFirst(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)

    monkeypatch.setattr(subprocess, "Popen", ExitedFirst)

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", "raise SystemExit(4)", stdout=PIPE)
        out, _ = await proc.communicate()
        return out, proc.returncode

    assert run(main()) == (b"", 4)
    assert _children() == []


@_WAITID
@pytest.mark.zloop_only
def test_watching_an_exited_unreaped_child(zloop_module):
    # Refused (ProcessLookupError) where the kernel refuses it (macOS:
    # XNU's EVFILT_PROC no longer finds an exiting process), else heard at
    # once (FreeBSD's EVFILT_PROC, Linux's pidfd).
    lp = zloop_module.new_event_loop()
    try:
        child = subprocess.Popen([PY, "-c", "raise SystemExit(6)"])
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        if exited_child_watch_refused(lp):
            with pytest.raises(ProcessLookupError):
                lp._watch_child(child.pid, lambda: None)
        else:
            heard = lp.create_future()
            lp._watch_child(child.pid, heard.set_result, "heard")
            assert lp.run_until_complete(heard) == "heard"
        assert child.wait() == 6
    finally:
        lp.close()
