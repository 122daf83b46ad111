"""Tools that look into a running loop from outside, as docs/observing.md
says they do: py-spy's `dump --native` and `record --native` unwind from
the wait's system call through the loop's own native frames into the
interpreter's, with no unwind error, on each backend, as they do on stock
asyncio, and zloop's frames are named (its symbol table, or in a
development build its debug info); on 3.14+, `python -m asyncio ps` and
`pstree` list a loop's tasks as on asyncio.

Both attach with ptrace and read /proc: where they may not (not root, a
ptrace policy, no /proc, another OS), the cases skip, saying why. About
five seconds in all.
"""

import os
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

from _support import build_backends

# The child: a loop serving nothing, blocked in its wait for an hour.
_CHILD = """
import asyncio, sys
async def main():
    print("ready", flush=True)
    await asyncio.sleep(3600)
if sys.argv[1] == "zloop":
    import zloop
    zloop.run(main())
else:
    asyncio.run(main())
"""
_REFUSED = ("Permission denied", "Operation not permitted", "ptrace")
# A frame py-spy found in no mapped file.
_LOST = re.compile(r"0x[0-9a-f]+ \(\?\)")


def _py_spy():
    scripts = sysconfig.get_path("scripts")
    found = shutil.which("py-spy", path=scripts) or shutil.which("py-spy")
    if found is None:
        pytest.skip("no py-spy (pip install -r tests/requirements.txt)")
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/maps"):
        pytest.skip("py-spy's native unwinding reads /proc (Linux)")
    return found


def _spy(py_spy, loop_name, backend, tmp_path, *args):
    """py-spy ARGS --pid CHILD on a child blocked in its loop's wait."""
    return _attach(_CHILD, loop_name, backend, tmp_path,
                   lambda pid: [py_spy, *args, "--pid", str(pid)])


def _attach(child_code, loop_name, backend, tmp_path, command):
    """`command(pid)`'s exit status and output, run on a child running
    `child_code` once it printed "ready"."""
    env = dict(os.environ)
    if backend is not None:
        env["ZLOOP_BACKEND"] = backend
    if loop_name == "zloop":
        # The child imports the zloop this process runs (the source tree
        # with its in-place build, or the one installed), never the source
        # tree by accident: its working directory, first on `-c`'s path,
        # is empty.
        import zloop

        here = os.path.dirname(os.path.dirname(os.path.abspath(zloop.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    child = subprocess.Popen([sys.executable, "-c", child_code, loop_name], env=env,
                             stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert child.stdout.readline() == "ready\n"
        out = subprocess.run(command(child.pid), capture_output=True, text=True, timeout=20)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    text = out.stdout + out.stderr
    if out.returncode != 0 and any(word in text for word in _REFUSED):
        pytest.skip(f"{command(child.pid)[0]} may not attach here: {text.strip()[:200]}")
    return out.returncode, text


def _backends(loop_name):
    return build_backends() if loop_name == "zloop" else (None,)


def test_py_spy_dump_native_unwinds_the_waiting_loop(loop_name, tmp_path):
    py_spy = _py_spy()
    for backend in _backends(loop_name):
        rc, text = _spy(py_spy, loop_name, backend, tmp_path, "dump", "--native")
        assert rc == 0, (backend, text)
        assert "run_forever" in text, (backend, text)
        # A return address in no module: the unwinder lost its way there
        # (libunwind before 1.7 on lld's layout went on by frame pointers).
        assert not _LOST.search(text), (backend, text)
        if loop_name == "zloop":
            # Its own frames by name, from the wait up to the entry point.
            for frame in ("reactor.Reactor.runOnce", "loop.loop.runForeverNative"):
                assert re.search(rf"^\s+{re.escape(frame)} \(", text, re.M), (backend, text)


def test_py_spy_record_native_has_no_unwind_errors(loop_name, tmp_path):
    py_spy = _py_spy()
    for backend in _backends(loop_name):
        out = tmp_path / f"{backend}.txt"
        rc, text = _spy(py_spy, loop_name, backend, tmp_path, "record", "--native", "--idle",
                        "--duration", "1", "--rate", "50", "--format", "raw",
                        "--output", str(out))
        assert rc == 0, (backend, text)
        counts = re.search(r"Samples: (\d+) Errors: (\d+)", text)
        assert counts and int(counts[1]) > 0 and counts[2] == "0", (backend, text)
        stacks = out.read_text()
        assert "run_forever" in stacks
        assert not _LOST.search(stacks), (backend, stacks)
        if loop_name == "zloop":
            assert "reactor.Reactor.runOnce" in stacks


# Two named tasks waiting in a TaskGroup.
_TASKS = """
import asyncio, sys
async def worker():
    await asyncio.sleep(3600)
async def main():
    async with asyncio.TaskGroup() as tg:
        tg.create_task(worker(), name="worker-1")
        tg.create_task(worker(), name="worker-2")
        print("ready", flush=True)
if sys.argv[1] == "zloop":
    import zloop
    zloop.run(main())
else:
    asyncio.run(main())
"""


@pytest.mark.skipif(sys.version_info < (3, 14), reason="python -m asyncio ps is new in 3.14")
def test_asyncio_ps_and_pstree_list_the_loops_tasks(loop_name, tmp_path):
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("asyncio ps reads another process's memory through /proc")
    for tool in ("ps", "pstree"):
        rc, text = _attach(_TASKS, loop_name, None, tmp_path,
                           lambda pid: [sys.executable, "-m", "asyncio", tool, str(pid)])
        assert rc == 0, (tool, text)
        for name in ("worker-1", "worker-2", "Task-1"):
            assert name in text, (tool, text)
        assert "sleep -> worker" in text if tool == "ps" else "└──  worker " in text, text
