"""``python -m zloop.compat check`` and the zloop.testing plugin, run as a
user would: as subprocesses, on the small projects in fixtures/.

- swapcheck/: four tests, one of which passes on stock asyncio only, by
  design (the cache and stop-at-first-failure options are tried on it);
- anyio_trio/: AnyIO's plugin, each test on asyncio and on trio;
- own_loop/: pytest-asyncio running every test on the project's own loop
  class;
- asyncio_scope/: pytest-asyncio with filterwarnings = error;
- subdir/: the configuration at the top, the tests below it;
- unittest_only/: no test that pytest collects.

Each check runs a fixture's suite a few times (about a second a run); no
network is needed. The plugins some fixtures need (pytest-asyncio, AnyIO's
with trio) are in tests/requirements.txt: the tests that need them skip only
where they cannot be imported.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import zloop
from _platform import default_backend

ROOT = Path(zloop.__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
DIFFERS = "check_swap.py::test_loop_is_stock_asyncio"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("ZLOOP_TEST_LOOP", None)
    env.pop("ZLOOP_COMPAT_DIR", None)
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _run(cwd, *args):
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def _copy(tmp_path, name):
    """A copy of a fixture project, so that no run writes into the checkout."""
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return target


@pytest.fixture
def project(tmp_path):
    return _copy(tmp_path, "swapcheck")


def _table(output):
    """check's table: {"asyncio": {column: cell}, "zloop": ...} (a backend
    run's key is "zloop-BACKEND")."""
    lines = output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["loop", "backend"])
    columns = lines[head].split()
    rows = {}
    for line in lines[head + 1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) != len(columns):
            break
        row = dict(zip(columns, cells))
        key = row["loop"] + ("" if row["backend"] == "default" else "-" + row["backend"])
        rows[key] = row
    return rows


def _expected_file(tmp_path, test, reason="asserts the loop is stock asyncio's, by design"):
    path = tmp_path / "expected.toml"
    path.write_text(f'[[zloop]]\ntest = "{test}"\nreason = "{reason}"\n')
    return path


def test_check_reports_the_differing_test_and_fails(project):
    rc, out = _run(project, "-m", "zloop.compat", "check", "--reruns", "1")
    assert rc == 1, out
    unlisted = [line for line in out.splitlines() if line.strip().startswith("UNLISTED")]
    assert len(unlisted) == 1, out
    assert f"{DIFFERS}: asyncio passed, zloop failed" in unlisted[0]
    # The first lines of the failure follow it.
    assert "E       AssertionError" in out
    # Proof that each run ran on its loop: 3 of the 4 tests run a loop.
    table = _table(out)
    assert table["asyncio"]["on_loop"] == table["zloop"]["on_loop"] == "3", out
    assert table["zloop"]["no_loop"] == "1"
    assert table["zloop"]["differs"] == "1"
    assert "FLAKY" not in out


def test_check_passes_when_the_difference_is_listed(project, tmp_path):
    expected = _expected_file(tmp_path, DIFFERS)
    backends = ["--backend", "epoll"] if default_backend() == "epoll" else []
    rc, out = _run(project, "-m", "zloop.compat", "check", "--expected", str(expected),
                   *backends)
    assert rc == 0, out
    assert f"LISTED    {DIFFERS}" in out
    assert "UNLISTED" not in out
    row = _table(out)["zloop-epoll" if backends else "zloop"]
    assert (row["passed"], row["failed"]) == ("3", "1")


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


# --- the check on any pytest suite ---------------------------------------------------


def test_a_test_that_ran_no_loop_in_either_run_is_no_difference(tmp_path):
    # AnyIO runs each test on asyncio and on trio. test_timing[trio] fails
    # in the first run (stock asyncio's) and passes in the second: no event
    # loop ran in it either time, so that is no loop difference.
    pytest.importorskip("anyio")
    pytest.importorskip("trio")
    tree = _copy(tmp_path, "anyio_trio")
    rc, out = _run(tree, "-m", "zloop.compat", "check", "--reruns", "0")
    assert rc == 0, out
    assert "UNLISTED" not in out
    line = next(line for line in out.splitlines() if line.strip().startswith("NO LOOP"))
    assert "check_backends.py::test_timing[trio]: asyncio failed, zloop passed" in line
    assert "ran no event loop in either run" in line
    row = _table(out)["zloop"]
    assert (row["differs"], row["not_counted"]) == ("0", "1"), out
    assert (row["on_loop"], row["no_loop"]) == ("3", "3"), out


@pytest.mark.parametrize("addopts, extra", [
    ("--cache-clear", []),
    ("--lf --ff --nf --strict-config", []),
    ("--sw --maxfail=1", []),  # stop at the first failure: the check runs them all
    ("--strict-config -p no:timeout", ["-p", "no:cacheprovider"]),  # plugins turned off
], ids=["cache-clear", "lf-ff-nf", "stepwise", "plugins-off"])
def test_check_adds_nothing_a_projects_config_refuses(project, tmp_path, addopts, extra):
    (project / "pytest.ini").write_text(f"[pytest]\npython_files = check_*.py\n"
                                        f"addopts = {addopts}\n")
    expected = _expected_file(tmp_path, DIFFERS)
    rc, out = _run(project, "-m", "zloop.compat", "check", "--expected", str(expected),
                   "--", *extra)
    assert rc == 0, out
    assert f"LISTED    {DIFFERS}" in out
    table = _table(out)
    assert [table[k]["collected"] for k in ("asyncio", "zloop")] == ["4", "4"], out
    # Each run kept its cache apart, in the check's own directory.
    assert not (project / ".pytest_cache").exists()


def _needs_loop_factories():
    asyncio_plugin = pytest.importorskip("pytest_asyncio")
    version = tuple(int(p) for p in asyncio_plugin.__version__.split(".")[:2])
    if version < (1, 4):
        pytest.skip("pytest_asyncio_loop_factories needs pytest-asyncio 1.4 or later")


def test_a_suite_on_its_own_loop_class_is_not_compared(tmp_path):
    _needs_loop_factories()
    tree = _copy(tmp_path, "own_loop")
    rc, out = _run(tree, "-m", "zloop.compat", "check")
    assert rc == 3, out  # nothing compared: neither a pass nor a difference
    assert ("NOT COMPARED: 2 test(s) ran on the project's own loop class "
            "`virtualtime.VirtualTimeLoop` (a subclass of `asyncio.SelectorEventLoop`): "
            "a loop swap does not reach them; they were not compared") in out, out
    assert "is the plugin" not in out  # no false diagnosis
    assert "docs/validate.md" in out
    assert _table(out)["asyncio"]["other_loop"] == "2"
    assert "zloop" not in _table(out)  # no run on zloop: it could not reach them


def test_own_loop_tests_beside_others_are_noted_and_the_others_compared(tmp_path):
    _needs_loop_factories()
    tree = _copy(tmp_path, "own_loop")
    shutil.copy(FIXTURES / "swapcheck" / "check_swap.py", tree / "check_plain.py")
    rc, out = _run(tree, "-m", "zloop.compat", "check", "--reruns", "0")
    assert rc == 1, out
    assert "UNLISTED  check_plain.py::test_loop_is_stock_asyncio" in out
    assert "NOTE: 2 test(s) ran on the project's own loop class" in out
    row = _table(out)["zloop"]
    assert (row["on_loop"], row["other_loop"], row["differs"]) == ("3", "2", "1"), out


def test_output_is_a_progress_line_per_run_and_pytests_with_v(project, tmp_path):
    expected = _expected_file(tmp_path, DIFFERS)
    rc, out = _run(project, "-m", "zloop.compat", "check", "--expected", str(expected))
    assert rc == 0, out
    progress = [line for line in out.splitlines() if " tests done, " in line]
    assert [line.split(":")[1].strip() for line in progress] == ["asyncio", "zloop"], out
    assert "4 of 4 tests done" in progress[0]
    # None of pytest's own output: no summary line, no proof line, no command.
    assert "passed in" not in out and "zloop.testing:" not in out and "$ " not in out, out
    rc, out = _run(project, "-m", "zloop.compat", "check", "--expected", str(expected), "-v")
    assert rc == 0, out
    assert "3 of 4 tests ran on the zloop event loop" in out
    assert "1 failed, 3 passed in" in out


def test_pytest_asyncios_unset_loop_scope_is_named_with_its_fix(tmp_path):
    pytest.importorskip("pytest_asyncio")
    tree = _copy(tmp_path, "asyncio_scope")
    rc, out = _run(tree, "-m", "zloop.compat", "check")
    assert rc == 2, out
    assert "filterwarnings = error" in out and "plain pytest fails the same way" in out
    assert "-o asyncio_default_fixture_loop_scope=function" in out
    assert "docs/validate.md" in out
    # The end of pytest's output shows the error itself.
    assert 'INTERNALERROR> pytest.PytestDeprecationWarning: The configuration option ' \
           '"asyncio_default_fixture_loop_scope" is unset' in out
    rc, out = _run(tree, "-m", "zloop.compat", "check", "--",
                   "-o", "asyncio_default_fixture_loop_scope=function")
    assert rc == 0, out


def test_a_suite_pytest_collects_nothing_from_is_told_so(tmp_path):
    tree = _copy(tmp_path, "unittest_only")
    rc, out = _run(tree, "-m", "zloop.compat", "check")
    assert rc == 1, out
    assert "exit status 5 (no tests collected: run it where you run pytest" in out
    assert "is the plugin" not in out


def test_check_from_a_subdirectory_with_paths_keeps_them(tmp_path):
    # Run where a user would: in the tests' directory, with a path after
    # --. Test ids are the project's own (from its rootdir, as plain pytest
    # names them), and the reruns keep the path: test_flaky_once is told
    # apart as flaky only if its rerun finds it.
    tree = _copy(tmp_path, "subdir")
    expected = _expected_file(tmp_path, "tests/check_sub.py::test_differs")
    rc, out = _run(tree / "tests", "-m", "zloop.compat", "check", "--expected",
                   str(expected), "--", "check_sub.py")
    assert rc == 0, out
    assert "LISTED    tests/check_sub.py::test_differs" in out
    assert "FLAKY     tests/check_sub.py::test_flaky_once" in out


def test_the_command_line_is_on_top_of_the_check():
    # check and the runner below it never import the command line.
    code = ("import sys, zloop.compat.check, zloop.compat.runner; "
            "assert 'zloop.compat.cli' not in sys.modules, sorted(sys.modules)")
    rc, out = _run(ROOT, "-c", code)
    assert rc == 0, out
