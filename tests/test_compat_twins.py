"""The test_asyncio injection's twins (compat/asyncio_tests/
compat_asyncio_tests.py) come from the per-selector class of this machine's
default selector, so that test_events, test_sendfile and test_sock_lowlevel
run on the loop under test where there is no epoll (macOS, FreeBSD): shown
here on a machine without it, as far as test_asyncio can tell, with
``select.epoll`` hidden (compat/asyncio_tests/hide_epoll)."""

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

COMPAT = Path(__file__).resolve().parents[1] / "compat" / "asyncio_tests"


def _injection():
    spec = importlib.util.spec_from_file_location("compat_asyncio_tests_under_test",
                                                  COMPAT / "compat_asyncio_tests.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("selector,tests", [
    ("EpollSelector", "EPollEventLoopTests"),
    ("KqueueSelector", "KqueueEventLoopTests"),
    ("PollSelector", "PollEventLoopTests"),
    ("SelectSelector", "SelectEventLoopTests"),
])
def test_the_twin_is_of_the_default_selectors_class(monkeypatch, selector, tests):
    import selectors

    injection = _injection()
    monkeypatch.setattr(selectors, "DefaultSelector", type(selector, (), {}))
    for module in ("test_events", "test_sendfile", "test_sock_lowlevel"):
        assert injection.twins()["test.test_asyncio." + module] == ((tests,), "create_event_loop")


@pytest.mark.zloop_only
def test_without_epoll_the_twins_run_on_the_loop_under_test(zloop_module, tmp_path):
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    if not (stdlib / "test" / "test_asyncio" / "test_events.py").exists():
        pytest.skip("this Python has no test.test_asyncio (its test suite package is apart)")
    checkout = Path(zloop_module.__file__).resolve().parents[1]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(checkout), str(COMPAT), str(COMPAT / "hide_epoll")]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    report = tmp_path / "report.json"
    twin = "test/test_asyncio/test_events.py::LoopUnderTest_PollEventLoopTests::"
    wanted = [twin + "test_create_connection", twin + "test_run_until_complete_stopped"]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "zloop.testing", "-p", "compat_asyncio_tests",
         "--zloop-loop=zloop", f"--zloop-report={report}", "-p", "no:cacheprovider", "-q",
         f"--rootdir={stdlib}", *wanted],
        cwd=stdlib, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    tests = json.loads(report.read_text())["tests"]
    assert sorted(tests) == wanted
    for test, entry in tests.items():
        assert entry["outcome"] == "passed", (test, entry)
        assert entry["reached"], (test, entry)
        assert any(t.startswith("zloop") for t in entry["loops"]), (test, entry)
