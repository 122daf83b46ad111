"""zloop's own API (no asyncio counterpart): every test here is zloop_only.

These take the ``zloop_module`` fixture: they skip when ZLOOP_TEST_LOOPS
leaves zloop out, and fail (not skip) when zloop is requested but broken.
"""

import asyncio
import gc
import warnings

import pytest

from _platform import default_backend
from _support import PY, build_backends

pytestmark = pytest.mark.zloop_only


async def _which_loop():
    await asyncio.sleep(0)
    return asyncio.get_running_loop()


def test_new_event_loop_returns_a_zloop_loop(zloop_module):
    lp = zloop_module.new_event_loop()
    try:
        assert isinstance(lp, zloop_module.Loop)
        assert isinstance(lp, asyncio.AbstractEventLoop)
        assert not lp.is_running() and not lp.is_closed()
        assert lp.run_until_complete(_which_loop()) is lp
    finally:
        lp.close()
    assert lp.is_closed()


def test_loop_class_is_an_abstract_event_loop(zloop_module):
    assert issubclass(zloop_module.Loop, asyncio.AbstractEventLoop)


def test_loop_class_can_be_instantiated_directly(zloop_module):
    lp = zloop_module.Loop()
    try:
        assert lp.run_until_complete(asyncio.sleep(0, result="direct")) == "direct"
    finally:
        lp.close()


def test_each_new_event_loop_is_distinct(zloop_module):
    a, b = zloop_module.new_event_loop(), zloop_module.new_event_loop()
    try:
        assert a is not b
    finally:
        a.close()
        b.close()


def _policy_api():
    """asyncio's policy base class, getter and setter, without 3.14's
    deprecation warnings (asyncio's tests use the same private twins)."""
    events = asyncio.events
    if PY >= (3, 14):
        return (events._AbstractEventLoopPolicy, events._get_event_loop_policy,
                events._set_event_loop_policy)
    return (asyncio.AbstractEventLoopPolicy, asyncio.get_event_loop_policy,
            asyncio.set_event_loop_policy)


def test_event_loop_policy_makes_zloop_loops(zloop_module):
    policy = zloop_module.EventLoopPolicy()
    assert isinstance(policy, _policy_api()[0])
    lp = policy.new_event_loop()
    try:
        assert isinstance(lp, zloop_module.Loop)
    finally:
        lp.close()


def test_run_runs_a_coroutine_on_a_zloop_loop(zloop_module):
    seen = {}

    async def main():
        lp = await _which_loop()
        seen["loop"] = lp
        return "result"

    assert zloop_module.run(main()) == "result"
    assert isinstance(seen["loop"], zloop_module.Loop)
    assert seen["loop"].is_closed()


def test_run_propagates_exceptions(zloop_module):
    async def main():
        raise LookupError("from main")

    with pytest.raises(LookupError, match="from main"):
        zloop_module.run(main())


def test_run_debug_flag(zloop_module):
    async def main():
        return asyncio.get_running_loop().get_debug()

    assert zloop_module.run(main(), debug=True) is True


def test_run_inside_a_running_loop_raises(zloop_module):
    async def outer():
        inner = _which_loop()
        try:
            zloop_module.run(inner)
        finally:
            inner.close()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="cannot be called from a running event loop"):
            zloop_module.run(outer())
        gc.collect()
    # Refused before any loop was made (on 3.11 a Runner's close() used to
    # leave a shutdown_asyncgens() coroutine never awaited).
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


def test_install_sets_the_policy(zloop_module):
    _, get_policy, set_policy = _policy_api()
    old = get_policy()
    try:
        with warnings.catch_warnings():
            # 3.14 and 3.15: install() raises no warning of its own (policies
            # are deprecated there, and install() says so in its docstring).
            warnings.simplefilter("error")
            zloop_module.install()
        assert isinstance(get_policy(), zloop_module.EventLoopPolicy)
        lp = asyncio.new_event_loop()
        try:
            assert isinstance(lp, zloop_module.Loop)
        finally:
            lp.close()
        assert isinstance(asyncio.run(_which_loop()), zloop_module.Loop)
    finally:
        set_policy(old)


_USE_ZLOOP = """
import asyncio, zloop

async def main():
    loop = asyncio.get_running_loop()
    loop.call_soon(print, "callback")
    await asyncio.gather(asyncio.sleep(0), loop.run_in_executor(None, int))
    await asyncio.create_task(asyncio.sleep(0))
    return type(loop).__module__

print(zloop.run(main(), debug=True))
"""


def test_importing_and_using_zloop_raises_no_warning(zloop_module, tmp_path):
    # -W error: a warning from zloop's import or use (3.14 deprecates
    # asyncio's policy classes and asyncio.iscoroutinefunction) is an error.
    import os
    import subprocess
    import sys

    # The child imports the zloop this process runs (the checkout's in-place
    # build, or the installed one), never the checkout by accident: its
    # working directory, first on `-c`'s path, is empty.
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(zloop_module.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-W", "error", "-c", _USE_ZLOOP],
                         capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["callback", "zloop._loop"]


@pytest.mark.skipif(PY < (3, 12), reason="asyncio.run(loop_factory=) is new in 3.12")
def test_asyncio_run_with_zloop_factory(zloop_module):
    lp = asyncio.run(_which_loop(), loop_factory=zloop_module.new_event_loop)
    assert isinstance(lp, zloop_module.Loop)


def test_public_names(zloop_module):
    names = ["new_event_loop", "Loop", "run"]
    if zloop_module._policy.default_policy_class() is not None:
        names += ["EventLoopPolicy", "install"]  # while asyncio has policies
    for name in names:
        assert hasattr(zloop_module, name), name
    assert set(names) <= set(zloop_module.__all__)


@pytest.mark.parametrize("backend", build_backends())
def test_backend_is_chosen_per_loop(zloop_module, monkeypatch, backend):
    # A kernel that refuses io_uring falls back to epoll; this one has it.
    monkeypatch.setenv("ZLOOP_BACKEND", backend)
    assert zloop_module.BACKEND == backend
    lp = zloop_module.new_event_loop()
    try:
        assert lp.backend == lp._backend == backend  # _backend: the older name
        assert lp.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
    finally:
        lp.close()


def test_backends_are_the_builds_own(zloop_module, monkeypatch):
    assert zloop_module.BACKENDS[0] == default_backend()  # the default, first
    assert "BACKENDS" in zloop_module.__all__
    monkeypatch.setenv("ZLOOP_BACKEND", "")  # empty: the default, as unset
    assert zloop_module.BACKEND == zloop_module.BACKENDS[0]
    for backend in zloop_module.BACKENDS:
        monkeypatch.setenv("ZLOOP_BACKEND", backend)
        assert zloop_module.BACKEND == backend


@pytest.mark.parametrize("name", ["selectr", "kqueue", "EPOLL"])
def test_unknown_backend_is_refused_alike_by_BACKEND_and_loop_creation(
        zloop_module, monkeypatch, name):
    # kqueue is a backend name, but not of a default Linux build.
    if name in zloop_module.BACKENDS:
        pytest.skip(f"{name} is a backend of this build")
    monkeypatch.setenv("ZLOOP_BACKEND", name)
    with pytest.raises(ValueError) as at_import:
        zloop_module.BACKEND
    with pytest.raises(ValueError) as at_creation:
        zloop_module.new_event_loop()
    message = str(at_creation.value)
    assert str(at_import.value) == message
    assert f"ZLOOP_BACKEND is '{name}'" in message
    assert all(f"'{b}'" in message for b in zloop_module.BACKENDS), message


def test_unknown_backend_fails_loudly_and_cleanly(zloop_module, monkeypatch):
    monkeypatch.setenv("ZLOOP_BACKEND", "selectr")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no unclosed-loop ResourceWarning
        with pytest.raises(ValueError, match="ZLOOP_BACKEND"):
            zloop_module.new_event_loop()
