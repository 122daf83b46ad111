"""A loop nobody closed, freed while the interpreter shuts down.

pytest-asyncio 0.20 and others leave a loop unclosed, held by the policy, a
module global or a reference cycle, and the interpreter frees it at some
stage of its shutdown: in an atexit handler, while it tears the modules
down (their globals already None), or in its last garbage collection.
Stock asyncio's loop then closes itself in ``__del__`` (or is never freed)
and prints nothing but the ResourceWarning that ``-X dev`` shows (where its
close does not itself fail: 3.13's, in debug mode, during the module
teardown). zloop's must say what asyncio says of the loop, and nothing
more, and close completely: each scenario runs in a child interpreter on
both loops, and their stderr is compared, file names and line numbers
aside. A marker the loop writes once its close() is done
tells that the close completed: stock asyncio's close is skipped where
its ``__del__`` cannot warn any more, zloop's runs whatever the warning
does.
"""

import os
import re
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import asyncio, atexit, os, signal, sys
    which, stage = sys.argv[1], sys.argv[2]
    if which == "zloop":
        import zloop
        zloop.install()
        Base = zloop.Loop
    else:
        Base = asyncio.SelectorEventLoop

    class Loop(Base):
        # Bound as defaults: the module's globals are None, and the
        # builtins (super) may be gone, by the time a loop freed late in
        # the shutdown closes.
        def close(self, _write=os.write, _base=Base):
            _base.close(self)
            _write(2, b"closed: %d\\n" % self.is_closed())

    if stage == "policy-made":
        # A plain loop the policy made (zloop.install()'s, asyncio's own).
        loop = asyncio.new_event_loop()
    else:
        loop = Loop()
    if stage in ("policy-made", "policy", "policy-serving"):
        asyncio.set_event_loop(loop)
    if stage == "policy-serving":
        async def serve():
            global server
            server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
            loop.add_signal_handler(signal.SIGUSR1, lambda: None)
        loop.run_until_complete(serve())
    elif stage == "atexit":
        atexit.register(lambda: globals().pop("loop"))
    elif stage == "cycle":
        loop.itself = [loop]
        del loop
    """
)

# policy-made, policy: held by the policy's thread-local (the first made
# by the policy, with no marker); module: a module global,
# freed while the modules are torn down; atexit: freed by an atexit
# handler; cycle: freed by the last garbage collection.
STAGES = ["policy-made", "policy", "policy-serving", "module", "atexit", "cycle"]


def _stderr(loop_name, stage, flags, cwd):
    env = dict(os.environ)
    env.pop("PYTHONASYNCIODEBUG", None)
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.run(
        [sys.executable, *flags, "-c", SCRIPT, loop_name, stage],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        # Not the checkout's root, whose unbuilt zloop/ `-c` would import
        # ahead of the zloop under test.
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr
    # Where each loop's code lives differs; what it says must not.
    return re.sub(r'^(?:  File )?"?/[^:"]+"?(?::|, line )\d+[:,]? ?', "", proc.stderr, flags=re.M)


@pytest.mark.parametrize("flags", [[], ["-X", "dev"]], ids=["default", "dev-mode"])
@pytest.mark.parametrize("stage", STAGES)
def test_an_unclosed_loop_freed_at_exit_closes_as_silently_as_asyncio(stage, flags, tmp_path):
    pytest.importorskip("zloop")
    stock = _stderr("asyncio", stage, flags, tmp_path)
    got = _stderr("zloop", stage, flags, tmp_path)
    assert "Exception ignored" not in got and "Traceback" not in got, got
    # Closed, and completely, wherever asyncio's closes (zloop's also where
    # asyncio's __del__ fails to warn, late in the shutdown, and skips it).
    if CLOSED in stock:
        assert CLOSED in got
    # It says what asyncio says of the loop, and nothing asyncio does not
    # (asyncio itself may say more: 3.13's close() in debug mode fails
    # while the modules are torn down, and leaves its sockets unclosed).
    said, stock_said = got.replace(CLOSED, "").splitlines(), stock.splitlines()
    assert [line for line in said if line not in stock_said] == [], (got, stock)
    loop_warnings = [line for line in stock_said if "unclosed event loop" in line]
    assert [line for line in said if "unclosed event loop" in line] == loop_warnings, (got, stock)


CLOSED = "closed: 1\n"
