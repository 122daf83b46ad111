"""zloop's public API is typed: a user's script type-checks under mypy --strict."""

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.zloop_only

_USER_SCRIPT = textwrap.dedent(
    """
    import asyncio
    import sys

    import zloop


    async def main() -> str:
        await asyncio.sleep(0)
        return "ok"


    loop: zloop.Loop = zloop.new_event_loop()
    handle: asyncio.Handle = loop.call_later(0.1, print, "x")
    handle.cancel()
    loop.close()
    a: str = zloop.run(main())
    if sys.version_info >= (3, 12):
        b: str = asyncio.run(main(), loop_factory=zloop.new_event_loop)
    with asyncio.Runner(loop_factory=zloop.new_event_loop) as runner:
        c: str = runner.run(main())
    if sys.version_info < (3, 14):
        zloop.install()
        policy: asyncio.AbstractEventLoopPolicy = zloop.EventLoopPolicy()
    backend: str = zloop.BACKEND
    version: str = zloop.__version__
    """
)


def _mypy(tmp_path, source):
    import zloop

    script = tmp_path / "user.py"
    script.write_text(source)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(zloop.__file__)))
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
           "--cache-dir", str(tmp_path / ".mypy_cache"), str(script)]
    if "site-packages" in package_parent:
        cmd[3:3] = ["--python-executable", sys.executable]  # installed: found there
    else:
        env["MYPYPATH"] = package_parent  # a checkout: found through MYPYPATH
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def test_a_user_script_type_checks_strictly(tmp_path):
    proc = _mypy(tmp_path, _USER_SCRIPT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success" in proc.stdout


def test_a_type_error_against_the_api_is_caught(tmp_path):
    # The check above proves something only if mypy sees zloop's types.
    proc = _mypy(tmp_path, "import zloop\nx: int = zloop.new_event_loop()\n")
    assert proc.returncode == 1
    assert 'has type "Loop"' in proc.stdout, proc.stdout
