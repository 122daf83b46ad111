"""``python -m zloop.compat check`` and the zloop.testing plugin, run as a
user would: as subprocesses, on the small projects in fixtures/.

- swapcheck/: four tests, one of which passes on stock asyncio only, by
  design (the cache and stop-at-first-failure options are tried on it);
- anyio_trio/: AnyIO's plugin, each test on asyncio and on trio;
- own_loop/: pytest-asyncio running every test on the project's own loop
  class;
- asyncio_scope/: pytest-asyncio with filterwarnings = error;
- subdir/: the configuration at the top, the tests below it;
- unittest_only/: no test that pytest collects;
- own_option/: a conftest that defines its own --event-loop option;
- mostly_errored/: eight of ten tests error in setup on both loops;
- unrun_loops/: a loop asyncio.new_event_loop() makes and never runs, and
  loops that tests choose themselves;
- no_loop/: coroutines driven by hand, no event loop at all;
- outcomes/: skipped, xfailed and xpassed tests;
- own_loop_internals/: a loop class of the suite's own that overrides
  asyncio's private _run_once;
- fork_child/: loops that run only in a forked multiprocessing child;
- spawned_children/: loops in new interpreters a test starts
  (multiprocessing spawn and forkserver, subprocess, runpytest_subprocess);
- hang/: a test that hangs off stock asyncio, and one that hangs everywhere,
  with no pytest-timeout;
- leftover_worker/: a worker process never joined (pytest waits at exit),
  and a process never waited for;
- uncollectable/: a test module that fails to import, and a long table at
  the end of pytest's output;
- asyncio_internals/: a private transport attribute written, and an
  isinstance() of asyncio's own handle class.

The limit tests wait for their limits (2 to 4 s each).

The commands README.md and docs/validate.md show are run here too, each on
one of these projects (test_documented_*).

Each check runs a fixture's suite a few times (about a second a run); no
network is needed. The plugins some fixtures need (pytest-asyncio, AnyIO's
with trio) are in tests/requirements.txt: the tests that need them skip only
where they cannot be imported.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import zloop
from _platform import default_backend

ROOT = Path(zloop.__file__).resolve().parents[1]  # where zloop is imported from
REPO = Path(__file__).resolve().parents[1]  # the checkout: README.md, docs/
FIXTURES = Path(__file__).parent / "fixtures"
DIFFERS = "check_swap.py::test_loop_is_stock_asyncio"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("ZLOOP_TEST_LOOP", None)
    env.pop("ZLOOP_COMPAT_DIR", None)
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _run(cwd, *args, env=None):
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env or _env(),
                          capture_output=True, text=True, timeout=300)
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


def test_a_suite_that_runs_no_loop_has_nothing_to_compare(project):
    rc, out = _run(project, "-m", "zloop.compat", "check", "--", "-k", "no_loop")
    assert rc == 3, out  # nothing compared: neither a pass nor a difference
    assert ("NOT COMPARED: none of the 1 tests ran a loop that asyncio.new_event_loop() "
            "built") in out
    assert "FAIL" not in out and "is the plugin" not in out


def test_coroutines_driven_by_hand_are_not_compared(tmp_path):
    tree = _copy(tmp_path, "no_loop")
    rc, out = _run(tree, "-m", "zloop.compat", "check")
    assert rc == 3, out
    assert ("NOT COMPARED: none of the 2 tests ran a loop that asyncio.new_event_loop() "
            "built (the suite's tests run no asyncio event loop: they are synchronous, or "
            "drive their coroutines by hand)") in out
    assert _table(out)["asyncio"]["status"] == "no loop"
    assert "zloop" not in _table(out)


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


@pytest.mark.parametrize("ini, loop", [("zloop_loop = zloop", "zloop"),
                                       ("zloop_loop = asyncio", "asyncio"),
                                       ("event_loop = zloop", "zloop")],  # earlier name
                         ids=["zloop", "asyncio", "earlier-name"])
def test_plugin_ini_option_picks_the_loop(project, ini, loop):
    (project / "pytest.ini").write_text(f"[pytest]\npython_files = check_*.py\n{ini}\n")
    rc, out = _run(project, "-m", "pytest", "-p", "zloop.testing", "-p", "no:cacheprovider")
    # Without --event-loop-report, the summary line is printed all the same.
    assert f"3 of 4 tests ran on the {loop} event loop" in out, out
    assert rc == (1 if loop == "zloop" else 0), out


def test_plugin_unknown_ini_value_is_an_error(project):
    (project / "pytest.ini").write_text("[pytest]\npython_files = check_*.py\n"
                                        "zloop_loop = zlop\n")
    rc, out = _run(project, "-m", "pytest", "-p", "zloop.testing", "-p", "no:cacheprovider")
    assert rc == 4, out  # pytest's usage error: nothing ran on asyncio instead
    assert "the zloop_loop ini option is 'zlop'" in out


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
    # Its methods are the public API's: its base can be made configurable.
    assert "make the loop class's base configurable" in out
    assert _table(out)["asyncio"]["other_loop"] == "2"
    assert "zloop" not in _table(out)  # no run on zloop: it could not reach them


def test_own_loop_class_on_asyncios_internals_is_not_told_to_change_its_base(tmp_path):
    tree = _copy(tmp_path, "own_loop_internals")
    rc, out = _run(tree, "-m", "zloop.compat", "check")
    assert rc == 3, out
    assert "ran on the project's own loop class `stepping.SteppingLoop`" in out
    assert ("`stepping.SteppingLoop` overrides its stock base's private `_run_once`: a "
            "class built on stock asyncio's internals cannot take zloop.Loop as its base"
            ) in out
    assert "configurable" not in out


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
    assert rc == 2, out  # nothing ran: pytest cannot run the suite as it is asked to
    assert ("CANNOT RUN: pytest collected no test (exit status 5): run the check where you "
            "run pytest, or name the tests after --") in out
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
    # The count of differences says where the flaky one went.
    assert ("1 listed, 0 unlisted, 0 stale list entries; 1 more went away when rerun "
            "(flaky, not counted)") in out


def test_the_command_line_is_on_top_of_the_check():
    # check and the runner below it never import the command line.
    code = ("import sys, zloop.compat.check, zloop.compat.runner; "
            "assert 'zloop.compat.cli' not in sys.modules, sorted(sys.modules)")
    rc, out = _run(ROOT, "-c", code)
    assert rc == 0, out


# --- a suite's own options, and a suite pytest cannot start --------------------------


def test_a_suites_own_event_loop_option_is_left_to_it(tmp_path):
    # conftest.py defines --event-loop (asyncio|uvloop), as uvloop-era
    # suites do: the check runs, and its runs are compared.
    tree = _copy(tmp_path, "own_option")
    rc, out = _run(tree, "-m", "zloop.compat", "check")
    assert rc == 0, out
    assert "compat: zloop: compared 2 of 2 tests" in out
    table = _table(out)
    assert table["asyncio"]["on_loop"] == table["zloop"]["on_loop"] == "2", out


def test_plugin_beside_a_suites_own_event_loop_option(tmp_path):
    tree = _copy(tmp_path, "own_option")
    rc, out = _run(tree, "-m", "pytest", "-p", "zloop.testing", "-p", "no:cacheprovider",
                   "--zloop-loop", "zloop", "--event-loop", "asyncio")
    assert rc == 0, out
    assert "2 of 2 tests ran on the zloop event loop" in out
    # --event-loop is the suite's: it takes the suite's choices only.
    rc, out = _run(tree, "-m", "pytest", "-p", "zloop.testing", "-p", "no:cacheprovider",
                   "--event-loop", "zloop")
    assert rc == 4, out
    assert "invalid choice: 'zloop'" in out


def test_pytest_stopping_before_collection_is_said_with_its_error(tmp_path):
    tree = _copy(tmp_path, "own_option")
    conftest = tree / "conftest.py"
    conftest.write_text(conftest.read_text() + "\n\ndef pytest_configure(config):\n"
                        "    raise RuntimeError('the suite cannot start here')\n")
    rc, out = _run(tree, "-m", "zloop.compat", "check")
    assert rc == 2, out
    assert ("pytest stopped before it collected any test: it exited with status" in out)
    assert "on: RuntimeError: the suite cannot start here" in out
    assert "some tests failed" not in out


# --- how much was compared ---------------------------------------------------------


def test_a_suite_that_mostly_errors_on_both_loops_gets_no_ok(tmp_path):
    tree = _copy(tmp_path, "mostly_errored")
    rc, out = _run(tree, "-m", "zloop.compat", "check")
    assert rc == 4, out
    assert "OK" not in out
    assert "compat: zloop: compared 2 of 10 tests; 8 errored or were skipped on both loops" \
        in out
    assert ("TOO LITTLE COMPARED: zloop: 8 of the 10 tests errored or were skipped on both "
            "loops (more than half); the commonest error, on stock asyncio too: fixture "
            "'event_loop' not found") in out
    row = _table(out)["zloop"]
    assert (row["status"], row["compared"], row["failed"]) == (
        "too little compared", "2", "8"), out


def test_both_runs_count_loops_alike(tmp_path):
    # A loop asyncio.new_event_loop() makes and never runs counts on both
    # sides; a loop the test chooses itself (a class, a factory) runs the
    # same in both runs, and is counted apart, not compared.
    tree = _copy(tmp_path, "unrun_loops")
    rc, out = _run(tree, "-m", "zloop.compat", "check")
    assert rc == 0, out
    table = _table(out)
    for loop in ("asyncio", "zloop"):
        assert (table[loop]["on_loop"], table[loop]["other_loop"]) == ("2", "2"), out
    assert table["zloop"]["compared"] == "2"
    assert ("NOTE: 2 test(s) ran only loops they chose themselves (built from a class, or "
            "by a factory they name), the same in every run") in out


def test_plugin_records_a_loop_made_and_never_run_on_stock_asyncio(tmp_path):
    tree = _copy(tmp_path, "unrun_loops")
    for loop in ("asyncio", "zloop"):
        rc, out = _run(tree, "-m", "pytest", "-p", "zloop.testing", "-p", "no:cacheprovider",
                       f"--zloop-loop={loop}", "-k", "never_run or test_run")
        assert rc == 0, out
        assert f"2 of 2 tests ran on the {loop} event loop" in out


def test_xfailed_and_xpassed_are_in_the_table(tmp_path):
    tree = _copy(tmp_path, "outcomes")
    rc, out = _run(tree, "-m", "zloop.compat", "check")
    assert rc == 0, out
    for loop in ("asyncio", "zloop"):
        row = _table(out)[loop]
        assert [row[c] for c in ("passed", "skipped", "xfailed", "xpassed")] == \
            ["1", "1", "1", "1"], out


def test_an_expected_entry_that_names_no_test_is_said_to(tmp_path):
    tree = _copy(tmp_path, "outcomes")
    expected = _expected_file(tmp_path, "check_outcomes.py::test_renamed_long_ago")
    rc, out = _run(tree, "-m", "zloop.compat", "check", "--expected", str(expected))
    assert rc == 0, out
    assert ("STALE     check_outcomes.py::test_renamed_long_ago: listed (asserts the loop is "
            "stock asyncio's, by design) but there is no such test in either run") in out


# --- child processes ------------------------------------------------------------------


def test_a_loop_in_a_forked_child_is_compared(tmp_path):
    # The tests run their loop only in a multiprocessing child forked from
    # the test's process, which inherits the swap: the child's loop counts
    # for the test, and a difference there is a difference.
    tree = _copy(tmp_path, "fork_child")
    rc, out = _run(tree, "-m", "zloop.compat", "check", "--reruns", "0")
    assert rc == 1, out
    unlisted = [line.split()[1] for line in out.splitlines()
                if line.strip().startswith("UNLISTED")]
    assert unlisted == ["check_fork.py::test_child_loop_is_stock_asyncio:"], out
    table = _table(out)
    for loop in ("asyncio", "zloop"):
        assert (table[loop]["on_loop"], table[loop]["no_loop"]) == ("2", "0"), out
    assert "NOTE: 2 test(s) ran loops in child processes they started" in out


def test_loops_in_new_interpreters_a_test_starts_are_compared(tmp_path):
    # multiprocessing's spawn and forkserver, a subprocess running Python
    # and pytester's runpytest_subprocess: each child runs on the run's
    # loop and counts for the test that started it. A forkserver started
    # by an earlier test forks the next test's child: it counts for the
    # next test. A child that never imports asyncio never has it imported.
    # zloop's entry point is installed, as pip installs it: the inner
    # pytest imports zloop (and so asyncio) before anything else does.
    tree = _copy(tmp_path, "spawned_children")
    env = _env()
    env["PYTHONPATH"] += os.pathsep + str(_entry_point_site(tmp_path))
    rc, out = _run(tree, "-m", "zloop.compat", "check", "--reruns", "0", env=env)
    assert rc == 1, out
    unlisted = sorted(line.split()[1].rstrip(":") for line in out.splitlines()
                      if line.strip().startswith("UNLISTED"))
    assert unlisted == [f"check_spawned.py::{test}" for test in (
        "test_multiprocessing_child[forkserver]", "test_multiprocessing_child[spawn]",
        "test_pytest_in_a_subprocess", "test_subprocess_running_python")], out
    table = _table(out)
    for loop in ("asyncio", "zloop"):
        assert (table[loop]["on_loop"], table[loop]["no_loop"]) == ("5", "1"), out
    assert table["zloop"]["passed"] == "2", out  # the forkserver's, the loopless child's


def test_spawned_children_can_be_left_on_stock_asyncio(tmp_path):
    tree = _copy(tmp_path, "spawned_children")
    rc, out = _run(tree, "-m", "pytest", "-p", "zloop.testing", "-p", "no:cacheprovider",
                   "--zloop-loop", "zloop", "--zloop-children", "no", "-k", "subprocess")
    assert rc == 0, out  # the children ran stock asyncio
    assert "0 of 2 tests ran on the zloop event loop" in out, out


# --- limits ---------------------------------------------------------------------------


def _lists_processes():
    """Whether the check can name the processes it ends here: it lists
    them from /proc on Linux and with ps elsewhere, and the kqueue lane
    hides /proc (which Linux's ps reads too). It ends them either way."""
    from zloop.compat.procs import members

    return bool(members(os.getpgrp()))


NO_LISTING = "this machine lists no processes (/proc hidden, as the kqueue lane does)"


def test_a_test_that_hangs_ends_the_check_and_is_named(tmp_path):
    # No pytest-timeout in the project: the check's own per-test limit
    # ends the run that hangs, and says what stock asyncio did.
    tree = _copy(tmp_path, "hang")
    rc, out = _run(tree, "-m", "zloop.compat", "check", "--timeout", "2", "--",
                   "-k", "not everywhere")
    assert rc == 5, out
    assert ("ENDED: zloop: check_hang.py::test_hangs_off_stock_asyncio ran for") in out
    assert "past the per-test limit (--timeout; no pytest-timeout in this run)" in out
    assert ("on stock asyncio, check_hang.py::test_hangs_off_stock_asyncio passed in") in out
    if _lists_processes():
        assert "ended the run's processes: pid " in out
        _assert_ended(out)


def test_the_overall_limit_ends_the_check_and_names_the_test(tmp_path):
    tree = _copy(tmp_path, "hang")
    rc, out = _run(tree, "-m", "zloop.compat", "check", "--timeout", "60",
                   "--total-timeout", "4", "--", "-k", "everywhere")
    assert rc == 5, out
    assert ("ENDED: asyncio: the check passed its overall limit of 4 s (--total-timeout), "
            "while check_hang.py::test_hangs_everywhere ran") in out
    if _lists_processes():
        _assert_ended(out)


def test_a_pytest_that_waits_on_a_leftover_worker_is_ended(tmp_path):
    # multiprocessing joins its worker at exit, for ever: the check ends
    # the run, and names the worker and the test that started it.
    tree = _copy(tmp_path, "leftover_worker")
    rc, out = _run(tree, "-m", "zloop.compat", "check", "--timeout", "2", "--",
                   "-k", "leaves_it")
    assert rc == 5, out
    assert "ENDED: asyncio: pytest had not exited" in out
    assert "after its last test ended (the per-test limit, --timeout)" in out
    if not _lists_processes():
        return
    ended = next(line for line in out.splitlines() if "ended the run's processes" in line)
    worker = [p for p in ended.split("; pid ") if "multiprocessing.spawn" in p]
    assert len(worker) == 1, out
    assert worker[0].endswith(
        "), started by check_leftover.py::test_starts_a_worker_and_leaves_it"), out
    _assert_ended(out)


def test_processes_left_running_after_pytest_exits_are_ended(tmp_path):
    # The stock-asyncio run alone: a process left running is each run's
    # to end, whatever the loop.
    if not _lists_processes():
        pytest.skip(NO_LISTING)
    tree = _copy(tmp_path, "leftover_worker")
    rc, out = _run(tree, "-m", "zloop.compat", "check", "--loops", "asyncio", "--",
                   "-k", "popen")
    assert rc == 0, out
    said = [line for line in out.splitlines() if "still running when pytest exited" in line]
    assert len(said) == 1 and "time.sleep(600)" in said[0], out
    _assert_ended(out)


def _assert_ended(out):
    """Every process the output says the check ended is gone (or a zombie:
    ended, and not yet reaped by the init process it was handed to)."""
    from zloop.compat.procs import alive

    pids = [int(pid) for pid in re.findall(r"pid (\d+) \(", out)]
    assert pids, out
    assert not [pid for pid in pids if alive(pid)], out


# --- a suite pytest cannot collect, and asyncio's internals -------------------------------


def test_a_suite_pytest_cannot_collect_exits_2_with_pytests_error(tmp_path):
    tree = _copy(tmp_path, "uncollectable")
    rc, out = _run(tree, "-m", "zloop.compat", "check")
    assert rc == 2, out
    assert ("CANNOT RUN: pytest could not collect the suite: 1 error(s) during collection, "
            "the first in check_broken.py: `ModuleNotFoundError: No module named "
            "'not_installed_here'`") in out
    # The excerpt is the first error, not the end of the output (a long
    # table there, as coverage's).
    excerpt = out[out.index("pytest's first error"):out.index("CANNOT RUN")]
    assert "ERROR collecting check_broken.py" in excerpt
    assert "E   ModuleNotFoundError: No module named 'not_installed_here'" in excerpt
    assert "module_39.py" not in out and "some tests failed" not in out


def test_differences_from_asyncios_internals_are_said_to_be_so(tmp_path):
    # As asyncio-dgram (writes a transport's _address) and aiocache
    # (asserts isinstance(handle, asyncio.Handle)).
    tree = _copy(tmp_path, "asyncio_internals")
    rc, out = _run(tree, "-m", "zloop.compat", "check", "--reruns", "0")
    assert rc == 1, out
    assert ("-> depends on stock asyncio's internals: it writes `_address`, a private "
            "attribute of stock asyncio's object, which `zloop._zloop.") in out
    assert ("-> depends on stock asyncio's internals: it asserts that an object is an "
            "instance of stock asyncio's own class `asyncio.TimerHandle`") in out
    assert ("2 of the differences come from a reliance on stock asyncio's internals" in out
            and "the project depends on asyncio internals" in out), out
    assert "is a zloop bug to report" not in out  # no other difference
    assert _table(out)["zloop"]["differs"] == "2"


@pytest.mark.parametrize("lines, said", [
    (["E   AttributeError: 'uvloop.loop.UDPTransport' object has no attribute '_address'"],
     "uses `_address`, a private attribute of stock asyncio's object, which "
     "`uvloop.loop.UDPTransport` does not have"),
    (["E   AttributeError: property '_sock' of 'Transport' object has no setter"],
     "writes `_sock`"),
    (["E   AssertionError: <zloop.Handle object at 0x1> is not an instance of "
      "<class 'asyncio.events.Handle'>"], "own class `asyncio.Handle`"),
    (["E   AttributeError: 'Loop' object has no attribute 'create_thing'"], None),
    (["E   AssertionError: assert 1 == 2"], None),
], ids=["uvloop-slot", "setter", "assertIsInstance", "public-name", "plain"])
def test_what_a_failure_says_of_asyncios_internals(lines, said):
    from zloop.compat.internals import depends_on_internals

    found = depends_on_internals(lines)
    assert (found is None) if said is None else (said in found), found


# --- the help, and the plugin's options without the plugin ----------------------------


def test_check_help_carries_the_reference():
    rc, out = _run(ROOT, "-m", "zloop.compat", "check", "--help")
    assert rc == 0, out
    for section in ("exit status:", "limits:", "child processes:", "differences:"):
        assert f"\n{section}\n" in out, out
    assert "  5  a limit ended the check" in out
    assert "See docs/validate.md" not in out


def _entry_point_site(tmp_path):
    """A directory that installs zloop's pytest11 entry point, as pip does
    (the checkout's zloop is imported from PYTHONPATH, not installed)."""
    import tomllib

    points = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    dist = tmp_path / "site" / "zloop_entry-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: zloop-entry\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\n" + "".join(
        f"{name} = {target}\n" for name, target in points["pytest11"].items()))
    return tmp_path / "site"


@pytest.mark.parametrize("how", ["flag", "ini"])
def test_the_plugins_options_without_the_plugin_are_a_usage_error(tmp_path, how):
    site = _entry_point_site(tmp_path)
    tree = _copy(tmp_path, "outcomes")
    args = ["--zloop-loop", "zloop"]
    if how == "ini":
        (tree / "pytest.ini").write_text("[pytest]\npython_files = check_*.py\n"
                                         "zloop_loop = zloop\n")
        args = []
    env = _env()
    env["PYTHONPATH"] += os.pathsep + str(site)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    proc = subprocess.run([*command, *args], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out  # pytest's usage error, not a run on stock asyncio
    flag = "--zloop-loop" if how == "flag" else "the zloop_loop ini option"
    assert f"ERROR: {flag} needs zloop's pytest plugin" in out, out
    assert "pytest -p zloop.testing --zloop-loop zloop" in out
    if how == "ini":
        return
    # With the plugin, the entry point's plugin stays out of the way.
    proc = subprocess.run([*command, "-p", "zloop.testing", *args], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "3 of 3 tests ran on the zloop event loop" in out


def test_first_error_shows_a_section_from_its_title():
    from zloop.compat.runner import first_error

    text = ["=== ERRORS ===", "____ ERROR collecting x.py ____", "Traceback:",
            *[f"  frame {n}" for n in range(40)], "E   ImportError: no", "E   (detail)",
            "=== short test summary info ===", "table " * 3]
    shown = [text[i] for i in first_error(text)]
    assert shown[0] == "____ ERROR collecting x.py ____"
    assert shown[-2:] == ["E   ImportError: no", "E   (detail)"] and len(shown) == 25
    assert first_error(["all good", "1 passed"]) is None


# --- what README.md and docs/validate.md show, run as shown ------------------------

_COMMAND = re.compile(r"(?:pytest|python -m zloop\.compat check)\b")


def _doc_text(path, section=None):
    text = (REPO / path).read_text(encoding="utf-8")
    if section is not None:
        text = text[text.index(section):]
        text = text[:text.find("\n## ", 1) if "\n## " in text[1:] else len(text)]
    return text


def _code_blocks(text):
    """The fenced blocks, and the blocks indented four spaces or more,
    each dedented."""
    blocks = [textwrap.dedent(b) for b in re.findall(r"```[a-z]*\n(.*?)```", text, re.S)]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    block: list[str] = []
    for line in prose.splitlines() + [""]:
        if line.startswith("    ") or (block and not line.strip()):
            block.append(line)
        elif block:
            blocks.append(textwrap.dedent("\n".join(block)).strip() + "\n")
            block = []
    return blocks


def _documented():
    """Every command line README's "Testing your code on zloop" and
    docs/validate.md show (in a code block or inline), and their
    configuration blocks: {what: block text} ("expected.toml" is the
    example of an --expected file). The option synopsis (``[--loops ...]``)
    is no command line."""
    found = {}
    for path, section in (("README.md", "## Testing your code on zloop"),
                          ("docs/validate.md", None)):
        text = _doc_text(path, section)
        for block in _code_blocks(text):
            if block.startswith("[pytest]"):
                found["ini"] = block
            elif "def anyio_backend" in block:
                found["anyio_backend"] = block
            elif block.startswith("# zloop-expected.toml"):
                found["expected.toml"] = block
            for line in block.splitlines():
                command = line.split("  #")[0].strip()
                if _COMMAND.match(command) and "[" not in command:
                    found[command] = block
        for line in text.splitlines():
            for command in re.findall(r"`([^`]+)`", line):
                if _COMMAND.match(command) and "[" not in command and " " in command:
                    found[command] = command
    return found


def _command(line):
    words = shlex.split(line)
    if words[0] == "pytest":
        return [sys.executable, "-m", "pytest", *words[1:]]
    assert words[0] == "python", line
    return [sys.executable, *words[1:]]


def _needs_io_uring():
    if "io_uring" not in zloop.BACKENDS:
        pytest.skip("this zloop build has no io_uring backend")


# What each documented line runs on, and what it must give: (fixture, what
# it needs, exit status, a line of the output).
_DOCUMENTED = {
    "pytest -p zloop.testing --zloop-loop zloop":
        ("outcomes", None, 0, "3 of 3 tests ran on the zloop event loop"),
    "pytest -p zloop.testing --zloop-loop zloop --zloop-backend io_uring":
        ("outcomes", _needs_io_uring, 0, "zloop.testing: event loop zloop, backend io_uring"),
    "python -m zloop.compat check":
        ("outcomes", None, 0, "compat: OK"),
    "python -m zloop.compat check --help":
        ("outcomes", None, 0, "\nexit status:\n"),
    "python -m zloop.compat check --loops asyncio,zloop,uvloop --backend epoll,io_uring":
        ("outcomes", lambda: (_needs_io_uring(), pytest.importorskip("uvloop")), 0,
         "compat: OK"),
    "python -m zloop.compat check -- -o asyncio_default_fixture_loop_scope=function":
        ("asyncio_scope", lambda: pytest.importorskip("pytest_asyncio"), 0, "compat: OK"),
    "python -m zloop.compat check -- mypkg/tests/smoke.py":
        ("unittest_only", None, 0, "compat: OK"),
    "python -m zloop.compat check --expected zloop-expected.toml":
        ("outcomes", None, 0, "listed (asserts isinstance(transport, "
         "asyncio.selector_events._SelectorTransport)) but there is no such test in "
         "either run"),
    "ini": ("outcomes", None, 0, "3 of 3 tests ran on the zloop event loop"),
    "anyio_backend": ("outcomes", lambda: pytest.importorskip("anyio"), 0, "1 passed"),
}


def test_every_documented_command_is_run_here():
    assert sorted(set(_documented()) - {"expected.toml"}) == sorted(_DOCUMENTED)


@pytest.mark.parametrize("what", sorted(_DOCUMENTED))
def test_documented_command_works(tmp_path, what):
    fixture, needs, status, said = _DOCUMENTED[what]
    if needs is not None:
        needs()
    documented = _documented()
    assert what in documented, f"no longer documented: {what}"
    tree = _copy(tmp_path, fixture)
    if what.endswith("mypkg/tests/smoke.py"):
        # Tests in a file pytest names, not one its patterns match.
        (tree / "mypkg" / "tests").mkdir(parents=True)
        (tree / "cases.py").rename(tree / "mypkg" / "tests" / "smoke.py")
    if what.endswith("zloop-expected.toml"):
        (tree / "zloop-expected.toml").write_text(documented["expected.toml"])
    if what == "ini":
        (tree / "pytest.ini").write_text(documented["ini"] + "python_files = check_*.py\n")
        command = [sys.executable, "-m", "pytest"]
    elif what == "anyio_backend":
        for test in tree.glob("check_*.py"):
            test.unlink()
        (tree / "conftest.py").write_text(documented["anyio_backend"])
        (tree / "check_anyio.py").write_text(
            "import asyncio\n\nimport pytest\n\n\n@pytest.mark.anyio\n"
            "async def test_runs_on_zloop():\n"
            "    assert type(asyncio.get_running_loop()).__module__.startswith('zloop')\n")
        command = [sys.executable, "-m", "pytest"]
    else:
        command = _command(what)
    proc = subprocess.run(command, cwd=tree, env=_env(), capture_output=True, text=True,
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == status, out
    assert said in out, out
