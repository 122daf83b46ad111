"""zloop's public API is typed, and the types say what the code does.

A user's script that uses every public name type-checks under
``mypy --strict --warn-unreachable`` (the branches that run are not marked
unreachable), and what the stub says about handles holds at run time on
both loops.
"""

import asyncio
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from _support import needs

_USER_SCRIPT = textwrap.dedent(
    """
    import asyncio
    import sys

    import zloop


    async def main() -> str:
        await asyncio.sleep(0)
        return "ok"


    def noop(text: str) -> None:
        pass


    loop: zloop.Loop = zloop.new_event_loop()
    handle = loop.call_soon(noop, "x")
    if isinstance(handle, zloop.Handle):  # what call_soon returns: reachable
        handle.cancel()
    assert handle.cancelled()
    threadsafe: zloop.Handle = loop.call_soon_threadsafe(noop, "x")
    timer = loop.call_later(0.1, noop, "x")
    if isinstance(timer, zloop.TimerHandle):
        when: float = timer.when()
    at: zloop.TimerHandle = loop.call_at(loop.time() + 1, noop, "x")
    first: bool = timer < at
    for h in (threadsafe, timer, at):
        h.cancel()
    # Handles passed where asyncio's AbstractEventLoop is the declared type
    # are still asyncio's as far as its stubs say.
    generic: asyncio.AbstractEventLoop = loop
    asyncio_handle: asyncio.Handle = generic.call_soon(noop, "x")
    asyncio_handle.cancel()
    running_on: str = loop.backend
    same: str = loop._backend
    assert running_on in zloop.BACKENDS and same == running_on
    features: tuple[str, ...] = loop._backend_features
    assert all(isinstance(name, str) for name in features)
    loop.close()
    a: str = zloop.run(main())
    if sys.version_info >= (3, 12):
        b: str = asyncio.run(main(), loop_factory=zloop.new_event_loop)
    with asyncio.Runner(loop_factory=zloop.new_event_loop) as runner:
        c: str = runner.run(main())
    looped: asyncio.AbstractEventLoop = zloop.Loop()
    looped.close()
    if sys.version_info < (3, 14):
        zloop.install()
        policy: asyncio.AbstractEventLoopPolicy = zloop.EventLoopPolicy()
    backend: str = zloop.BACKEND
    backends: tuple[str, ...] = zloop.BACKENDS
    version: str = zloop.__version__
    """
)


def _mypy(tmp_path, source):
    import zloop

    needs("mypy", strict=True)
    needs("librt", strict=True)  # mypy's compiled runtime, built from C where no wheel is
    script = tmp_path / "user.py"
    script.write_text(source)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(zloop.__file__)))
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "mypy", "--strict", "--warn-unreachable", "--no-incremental",
           "--cache-dir", str(tmp_path / ".mypy_cache"), str(script)]
    if importlib.util.find_spec("ast_serialize") is None:
        # mypy's native parser is a Rust extension, ast-serialize, which
        # has no wheel for some machines (FreeBSD): mypy's own parser then.
        cmd[3:3] = ["--no-native-parser"]
    if "site-packages" in package_parent:
        cmd[3:3] = ["--python-executable", sys.executable]  # installed: found there
    else:
        env["MYPYPATH"] = package_parent  # a checkout: found through MYPYPATH
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


@pytest.mark.zloop_only
def test_a_user_script_type_checks_strictly(tmp_path):
    proc = _mypy(tmp_path, _USER_SCRIPT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success" in proc.stdout


@pytest.mark.zloop_only
def test_a_type_error_against_the_api_is_caught(tmp_path):
    # The check above proves something only if mypy sees zloop's types.
    proc = _mypy(tmp_path, "import zloop\nx: int = zloop.new_event_loop()\n")
    assert proc.returncode == 1
    assert 'has type "Loop"' in proc.stdout, proc.stdout


@pytest.mark.zloop_only
def test_the_user_script_runs(tmp_path):
    # What mypy accepted is also what runs: the script's asserts hold.
    script = tmp_path / "user.py"
    script.write_text(_USER_SCRIPT)
    import zloop

    env = dict(os.environ)
    env.pop("ZLOOP_BACKEND", None)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(zloop.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", str(script)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_handles_are_what_the_stub_says(loop, loop_name):
    # zloop's handles are not asyncio's: asyncio.Handle is a plain class, not
    # an ABC, so there is no register(); the stub says the same.
    assert not hasattr(asyncio.Handle, "register")
    handles = [loop.call_soon(print), loop.call_soon_threadsafe(print),
               loop.call_later(1, print), loop.call_at(loop.time() + 1, print)]
    try:
        for handle in handles:
            assert isinstance(handle, asyncio.Handle) == (loop_name == "asyncio")
        assert all(isinstance(h, asyncio.TimerHandle) == (loop_name == "asyncio")
                   for h in handles[2:])
        if loop_name == "zloop":
            import zloop

            assert all(isinstance(h, zloop.Handle) for h in handles)
            assert all(isinstance(h, zloop.TimerHandle) for h in handles[2:])
            assert not any(isinstance(h, zloop.TimerHandle) for h in handles[:2])
    finally:
        for handle in handles:
            handle.cancel()
