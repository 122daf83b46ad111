"""``python -m zloop.compat check`` and the zloop.testing plugin, run as a
user would: as subprocesses, on the small project in fixtures/swapcheck/
(four tests, one of which passes on stock asyncio only, by design).

Each check runs the fixture's suite a few times (about a second a run); no
network is needed.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import zloop

ROOT = Path(zloop.__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "fixtures" / "swapcheck"
DIFFERS = "check_swap.py::test_loop_is_stock_asyncio"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("ZLOOP_TEST_LOOP", None)
    env.pop("ZLOOP_COMPAT_DIR", None)
    return env


def _run(cwd, *args):
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture
def project(tmp_path):
    """A copy of the fixture project, so that no run writes into the checkout."""
    target = tmp_path / "swapcheck"
    shutil.copytree(FIXTURE, target)
    return target


def _table_row(output, loop):
    rows = [line.split() for line in output.splitlines() if line.startswith("swapcheck ")]
    return next(row for row in rows if row[3] == loop)


def test_check_reports_the_differing_test_and_fails(project):
    rc, out = _run(project, "-m", "zloop.compat", "check", "--reruns", "1")
    assert rc == 1, out
    unlisted = [line for line in out.splitlines() if line.strip().startswith("UNLISTED")]
    assert len(unlisted) == 1, out
    assert f"{DIFFERS}: asyncio passed, zloop failed" in unlisted[0]
    # The first lines of the failure follow it.
    assert "E       AssertionError" in out
    # Proof that each run ran on its loop: 3 of the 4 tests run a loop.
    assert "3 of 4 tests ran on the zloop event loop" in out
    assert "3 of 4 tests ran on the asyncio event loop" in out
    assert _table_row(out, "zloop")[9] == "3"  # on_loop
    assert "FLAKY" not in out


def test_check_passes_when_the_difference_is_listed(project, tmp_path):
    expected = tmp_path / "expected.toml"
    expected.write_text(f'[[zloop]]\ntest = "{DIFFERS}"\n'
                        'reason = "asserts the loop is stock asyncio\'s, by design"\n')
    backends = ["--backend", "epoll"] if sys.platform.startswith("linux") else []
    rc, out = _run(project, "-m", "zloop.compat", "check", "--expected", str(expected),
                   *backends)
    assert rc == 0, out
    assert f"LISTED    {DIFFERS}" in out
    assert "UNLISTED" not in out
    assert _table_row(out, "zloop")[5:7] == ["3", "1"]  # passed, failed


def test_check_fails_when_no_test_runs_a_loop(project):
    rc, out = _run(project, "-m", "zloop.compat", "check", "--", "-k", "no_loop")
    assert rc == 1, out
    assert "no test ran an event loop, so there is nothing to compare" in out


def test_check_refuses_an_unknown_loop(project):
    rc, out = _run(project, "-m", "zloop.compat", "check", "--loops", "asyncio,zlop")
    assert rc == 2
    assert "--loops 'asyncio,zlop'" in out


def test_list_without_suites_says_where_they_are(tmp_path):
    env_dir = tmp_path / "empty"
    env_dir.mkdir()
    rc, out = _run(tmp_path, "-m", "zloop.compat", "--compat-dir", str(env_dir), "list")
    assert rc == 1
    assert "no suite definitions" in out and "python -m zloop.compat check" in out


def test_list_finds_a_local_compat_dir(tmp_path):
    suite = tmp_path / "compat" / "myproject"
    suite.mkdir(parents=True)
    (suite / "suite.toml").write_text('[suite]\nsource = "stdlib"\ndescription = "mine"\n')
    rc, out = _run(tmp_path, "-m", "zloop.compat", "list")
    assert rc == 0, out
    assert out.split()[0] == "myproject" and "mine" in out


@pytest.mark.parametrize("ini, loop", [("event_loop = zloop", "zloop"),
                                       ("event_loop = asyncio", "asyncio")])
def test_plugin_ini_option_picks_the_loop(project, ini, loop):
    (project / "pytest.ini").write_text(f"[pytest]\npython_files = check_*.py\n{ini}\n")
    rc, out = _run(project, "-m", "pytest", "-p", "zloop.testing", "-p", "no:cacheprovider")
    # Without --event-loop-report, the summary line is printed all the same.
    assert f"3 of 4 tests ran on the {loop} event loop" in out, out
    assert rc == (1 if loop == "zloop" else 0), out


def test_plugin_unknown_ini_value_is_an_error(project):
    (project / "pytest.ini").write_text("[pytest]\npython_files = check_*.py\n"
                                        "event_loop = zlop\n")
    rc, out = _run(project, "-m", "pytest", "-p", "zloop.testing", "-p", "no:cacheprovider")
    assert rc == 4, out  # pytest's usage error: nothing ran on asyncio instead
    assert "the event_loop ini option is 'zlop'" in out
