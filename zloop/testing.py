"""Run any pytest suite on a chosen event loop, and prove that it did.

    pytest -p zloop.testing --zloop-loop zloop [--zloop-report out.json]

The plugin swaps the loop behind asyncio's public API, so that pytest-asyncio,
AnyIO's pytest plugin (``anyio_backend = "asyncio"``), ``asyncio.run()``,
``asyncio.Runner`` and ``unittest.IsolatedAsyncioTestCase`` all build their loop
from the chosen factory, without a line of the suite changing:

- the default policy class's loop factory is replaced, so that
  ``asyncio.new_event_loop()`` returns the chosen loop even after a test resets
  the policy with ``asyncio.set_event_loop_policy(None)`` (CPython's own tests
  do this in every ``tearDownModule``);
- a policy instance is installed for the session.

Loops built directly from a class (``asyncio.SelectorEventLoop()``) or from a
factory the suite names (AnyIO's ``loop_factory``) stay what they are: that is
the suite's choice, not the public API's, and such a test runs the same loop
in every run (see ``compat/`` in zloop's repository for suites that need an
injection of their own).

Proof: the plugin wraps ``asyncio``'s ``_set_running_loop`` before any loop
module is imported, and records, for every test, the type of each loop that
ran during its setup, call and teardown, and whether the swap reached it: a
loop that the swapped ``asyncio.new_event_loop()`` built ran, or was built
(run or not). The stock-asyncio run is instrumented the same way, with stock
asyncio's own loop behind the same wrapper, so that both runs count alike.
Loops that run in the processes a test starts count for that test: a
forked child inherits the swap and the recorder, and a new Python
interpreter (multiprocessing's spawn and forkserver, ``subprocess``,
pytester's ``runpytest_subprocess``) takes them from a start-up hook that
the plugin puts first on its ``PYTHONPATH`` (``zloop.compat.children``;
``--zloop-children no`` leaves such interpreters alone).
``--zloop-report`` writes a JSON report with each test's outcome and loop
types (and, for a loop class of no known family, its stock base class and
the private methods of that base it overrides); ``python -m zloop.compat
diff`` compares two such reports (one on asyncio, one on zloop).

Loops: ``asyncio`` (stock), ``uvloop``, ``zloop``. With ``--zloop-backend
NAME`` (one of ``zloop.BACKENDS``) the plugin sets ``ZLOOP_BACKEND`` before
zloop is imported. Every flag has an ini option of the same name with
underscores (``zloop_loop = zloop``); an unknown loop or backend is a usage
error. The options are namespaced, so that they never collide with a suite's
own (uvloop-era conftests define ``--event-loop`` or ``--loop``); the
earlier spellings (``--event-loop``, ``--event-loop-backend``,
``--event-loop-report``, ``--event-loop-exclude``, ``--event-loop-label`` and
their ini options) are accepted where the suite does not define them.
``python -m zloop.compat check`` drives this plugin over a whole project
(docs/validate.md), with the options below the report's, which apply the
runner's own settings from inside pytest so that none of them can clash with
a project's configuration.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

import _zloop_pytest as pytest_options
from zloop.compat import children
# The swap and the recorder live apart from pytest, for the child processes
# a test starts (zloop.compat.children); these names are this module's too.
from zloop.compat.swap import (LOOP_NAMES, RECORDER, LoopRecorder,  # noqa: F401
                               backend_names, install_loop, is_loop_of, loop_factory,
                               loop_family, loop_type_name, stock_base, stock_overrides,
                               swap_reached)

# Installed at import: a -p plugin is imported before the suite's modules, and
# so before uvloop or zloop captures asyncio's _set_running_loop.
RECORDER.install()

# The user properties that carry a test's loop types, whether the swap
# reached it, and the stock base class of the loop types of no known family
# (with the base's private methods they override), from an xdist worker.
_LOOPS_PROPERTY = "zloop_loop_types"
_REACHED_PROPERTY = "zloop_reached"
_BASES_PROPERTY = "zloop_loop_bases"
_OVERRIDES_PROPERTY = "zloop_loop_overrides"
_CHILD_PROPERTY = "zloop_child_records"


def chosen_loop(config: pytest.Config) -> str:
    """The loop this run is on (``asyncio``, ``uvloop`` or ``zloop``), for a
    suite's injection plugin (``compat/``), after this plugin's
    ``pytest_configure``."""
    return config.stash[_STATE_KEY].loop


def chosen_factory(config: pytest.Config) -> Callable[[], Any]:
    """The factory ``asyncio.new_event_loop()`` calls in this run: an
    injection that builds a suite's loops with it puts them where the swap
    puts its own, counted as reached."""
    return config.stash[_STATE_KEY].factory


# --- pytest plugin ---------------------------------------------------------------


# Each option: (flag, ini name, help). The ini name is the flag's, with
# underscores, as pytest-timeout's ``timeout``: ``zloop_loop = zloop`` in a
# pytest.ini [pytest] section (or [tool.pytest.ini_options]) equals
# ``--zloop-loop zloop``. A flag wins over $ZLOOP_TEST_LOOP, which wins over
# the ini file. The ini name is also the option's dest: one of the suite's
# own options cannot share it.
_OPTIONS = pytest_options.USER_OPTIONS + (
    ("--zloop-select", "zloop_select",
     "run only the tests named in a JSON list of test ids (the runner's reruns: "
     "the run's own arguments stay as they were)"),
    ("--zloop-jobs", "zloop_jobs",
     "pytest-xdist workers, when xdist is active (0: none)"),
    ("--zloop-timeout", "zloop_timeout",
     "per-test timeout in seconds, when pytest-timeout is active"),
    ("--zloop-complete", "zloop_complete",
     "yes: run every test even where the configuration stops at the first failure "
     "(-x, --maxfail, --sw): two runs compared test by test must both be complete"),
)
_PATH_OPTIONS = (*pytest_options.PATH_OPTIONS, "zloop_select")
_FLAGS = {name: flag for flag, name, _ in _OPTIONS}
# The earlier spellings of the user's options, accepted only where the suite
# does not define the same flag or ini option itself (uvloop-era conftests
# have their own --event-loop): option -> (flag, ini name).
_OLD_SPELLINGS = {
    "zloop_loop": ("--event-loop", "event_loop"),
    "zloop_backend": ("--event-loop-backend", "event_loop_backend"),
    "zloop_report": ("--event-loop-report", "event_loop_report"),
    "zloop_exclude": ("--event-loop-exclude", "event_loop_exclude"),
    "zloop_label": ("--event-loop-label", "event_loop_label"),
}
_GROUP = pytest_options.GROUP


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    group = parser.getgroup(_GROUP, "run the suite on a chosen event loop (zloop.testing)")
    # The options zloop's entry-point plugin registered, where it was loaded
    # first (zloop.testing loaded by a conftest's pytest_plugins): the same.
    taken_flags, taken_ini = _taken_flags(parser) or set(), _taken_ini(parser) or set()
    for flag, name, text in _OPTIONS:
        # Checked in pytest_configure, not by argparse's choices: the ini and
        # the environment need the same check, and it must be an error.
        if flag not in taken_flags:
            group.addoption(flag, dest=name, default=None,
                            metavar="PATH" if name in _PATH_OPTIONS else None, help=text)
        if name not in taken_ini:
            parser.addini(name, help=f"{text} (as {flag})", default=None)
    if pluginmanager.is_blocked("cacheprovider"):
        # The compat runner points each run's cache at a directory of its
        # own (-o cache_dir=...). With the cache plugin turned off by the
        # project (-p no:cacheprovider), that key would be unknown, which
        # --strict-config or filterwarnings = error turn into a failure.
        parser.addini("cache_dir", help="unused: the cache plugin is off (zloop.testing)")


@pytest.hookimpl(hookwrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,
                                  args: list[str]) -> Any:
    """After the suite's own conftest files added their options: the earlier
    spellings, each where the suite left it free. The command line is parsed
    in full only after this hook, so a flag added here is taken there."""
    yield
    taken_flags = _taken_flags(parser)
    taken_ini = _taken_ini(parser)
    group = parser.getgroup(_GROUP)
    accepted = early_config.stash.setdefault(_OLD_KEY, {})
    for name, (flag, ini) in _OLD_SPELLINGS.items():
        if taken_flags is None or taken_ini is None or flag in taken_flags or ini in taken_ini:
            continue
        help_text = f"as {_FLAGS[name]} (its earlier name)"
        group.addoption(flag, dest="zloop_old_" + name, default=None,
                        metavar="PATH" if name in _PATH_OPTIONS else None, help=help_text)
        parser.addini(ini, help=help_text, default=None)
        accepted[name] = (flag, ini)


def _taken_flags(parser: pytest.Parser) -> set[str] | None:
    """Every flag registered so far, or None where pytest's parser does not
    say (then no earlier spelling is added: it might collide)."""
    groups = [getattr(parser, "_anonymous", None), *getattr(parser, "_groups", [])]
    try:
        return {flag for group in groups if group is not None
                for option in group.options for flag in option.names()}
    except AttributeError:
        return None


def _taken_ini(parser: pytest.Parser) -> set[str] | None:
    names = getattr(parser, "_inidict", None)
    if names is None:
        return None
    return {*names, *getattr(parser, "_ini_aliases", {})}


def _setting(config: pytest.Config, name: str,
             env: str | None = None) -> tuple[str | None, str]:
    """An option's value and where it came from: the flag (or its earlier
    spelling), else the environment variable, else the ini option (or its
    earlier spelling; a relative path there is relative to the ini file's
    directory)."""
    old_flag, old_ini = config.stash.get(_OLD_KEY, {}).get(name, (None, None))
    value = config.getoption(name)
    if value is not None:
        return value, _FLAGS[name]
    if old_flag is not None:
        value = config.getoption("zloop_old_" + name)
        if value is not None:
            return value, old_flag
    if env and os.environ.get(env):
        return os.environ[env], f"${env}"
    for ini in (name, old_ini):
        value = config.getini(ini) if ini is not None else None
        if value:
            if name in _PATH_OPTIONS and config.inipath is not None:
                value = str(config.inipath.parent / value)
            return value, f"the {ini} ini option"
    return None, _FLAGS[name]


def _choice(config: pytest.Config, name: str, choices: tuple[str, ...],
            env: str | None = None) -> str | None:
    """A setting that must be one of ``choices``: anything else is a usage
    error, never a silent run on the default loop."""
    value, where = _setting(config, name, env)
    if value is not None and value not in choices:
        raise pytest.UsageError(
            f"zloop.testing: {where} is {value!r}; choose from {', '.join(choices)}")
    return value


def _backend_choice(config: pytest.Config) -> str | None:
    value, where = _setting(config, "zloop_backend")
    if value is None:
        return None
    try:
        names = backend_names()
    except ImportError as exc:
        raise pytest.UsageError(f"zloop.testing: {where} is {value!r}, but zloop is not "
                                f"importable here: {exc}") from None
    return _choice(config, "zloop_backend", names)


def _count(config: pytest.Config, name: str) -> float | None:
    value, where = _setting(config, name)
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if number < 0:
        raise pytest.UsageError(f"zloop.testing: {where} is {value!r}; expected a number "
                                "0 or more")
    return number


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Applies ``--zloop-complete``, and ``--zloop-jobs`` and
    ``--zloop-timeout`` to pytest-xdist and pytest-timeout, each only
    when the plugin is active in this run: a flag of theirs on the command
    line would be an unknown argument in a project that turns the plugin
    off. Runs before any ``pytest_configure`` (the stepwise plugin's
    registers itself there) and before xdist's own ``pytest_cmdline_main``,
    which turns ``numprocesses`` into workers."""
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller's options came with it
    complete = _choice(config, "zloop_complete", ("yes", "no"))
    if complete == "yes":
        config.option.maxfail = 0
        for name in ("stepwise", "stepwise_skip", "stepwise_reset"):
            if hasattr(config.option, name):
                setattr(config.option, name, False)
    jobs = _count(config, "zloop_jobs")
    xdist = config.pluginmanager.hasplugin("xdist")
    if jobs is not None and xdist:
        _set_workers(config, int(jobs))
    timeout_s = _count(config, "zloop_timeout")
    if timeout_s is not None and config.pluginmanager.hasplugin("timeout"):
        config.option.timeout = timeout_s
        # In a worker, the thread method ends the worker and xdist reports
        # the test; in one process only the signal method keeps the run going.
        workers = xdist and bool(getattr(config.option, "numprocesses", 0))
        config.option.timeout_method = "thread" if workers else "signal"


def _set_workers(config: pytest.Config, jobs: int) -> None:
    """xdist's worker count, and what xdist's own ``pytest_cmdline_main``
    derives from it: that hook is tryfirst too, and was registered after
    this plugin (an entry point after ``-p``), so it has already run, with
    the count the command line gave."""
    config.option.numprocesses = jobs
    if not jobs:
        config.option.dist = "no"
        config.option.tx = []
        return
    if config.option.dist == "no":
        config.option.dist = "load"
    most = getattr(config.option, "maxprocesses", None)
    config.option.tx = ["popen"] * (min(jobs, most) if most else jobs)
    # A hang ends its worker; xdist's default of 4 restarts per worker
    # would then stop the run and leave the rest unrun.
    config.option.maxworkerrestart = "100000"


def pytest_configure(config: pytest.Config) -> None:
    name = _choice(config, "zloop_loop", LOOP_NAMES, "ZLOOP_TEST_LOOP") or "asyncio"
    backend = _backend_choice(config)
    spawned = _choice(config, "zloop_children", ("yes", "no")) != "no"
    factory = install_loop(name, backend)
    config.stash[_STATE_KEY] = _State(config, name, backend, factory, spawned)
    config.pluginmanager.register(config.stash[_STATE_KEY], "zloop-testing-state")
    config.addinivalue_line("markers", "zloop_loop: used by zloop.testing (reserved)")


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE_KEY, None)
    if state is not None:
        state.close()


def pytest_report_header(config: pytest.Config) -> str:
    state = config.stash[_STATE_KEY]
    backend = f", backend {state.backend}" if state.backend else ""
    factory = getattr(state.factory, "__wrapped__", state.factory)
    return f"zloop.testing: event loop {state.loop}{backend} ({factory!r})"


class _State:
    """Per-session state: the chosen loop, the exclusions and the report."""

    def __init__(self, config: pytest.Config, loop: str, backend: str | None,
                 factory: Callable[[], Any], spawned: bool) -> None:
        self.config = config
        self.loop = loop
        self.backend = backend
        self.factory = factory
        self.is_worker = hasattr(config, "workerinput")
        self.report_path = _setting(config, "zloop_report")[0]
        self.excludes = _load_excludes(_setting(config, "zloop_exclude")[0])
        self.select = _load_select(_setting(config, "zloop_select")[0])
        self.excluded: dict[str, str] = {}
        self.tests: dict[str, dict[str, Any]] = {}
        self.loop_bases: dict[str, str] = {}
        self.loop_overrides: dict[str, list[str]] = {}
        self.started_s = time.time()
        self._jsonl = None
        if self.report_path and not self.is_worker:
            Path(self.report_path).parent.mkdir(parents=True, exist_ok=True)
            # One line per finished test, written as it finishes: a run that is
            # killed still leaves what it had.
            self._jsonl = open(self.report_path + ".jsonl", "w", encoding="utf-8")
        self.collect_errors: list[dict[str, Any]] = []
        # The children's records: a directory of this run's own (a worker
        # uses its controller's), beside the report when there is one.
        self.children = children.Parent.inherited() if self.is_worker else \
            children.Parent.create(loop, backend, spawned, Path(
                self.report_path + ".children") if self.report_path else None)
        if self.children is None:
            RECORDER.own()
        else:
            if not self.is_worker:
                self.children.export()
            children.own(self.children.channel)
        # Which test runs now, for the runner's per-test limit: a file per
        # process that runs tests.
        self._running_path = None
        if self.report_path:
            worker = (config.workerinput["workerid"]  # type: ignore[attr-defined]
                      if self.is_worker else "main")
            self._running_path = Path(f"{self.report_path}.running-{worker}")
        self._timeout_plugin = bool(config.pluginmanager.hasplugin("timeout")
                                    and getattr(config.option, "timeout", None))

    def close(self) -> None:
        if self.children is not None and not self.is_worker:
            self.children.close(remove=True)

    # Recording, on whichever process runs the test.

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any):
        RECORDER.take()  # loops from between tests belong to no test
        # The processes the test starts inherit its name (see
        # zloop.compat.children), and so count for it.
        os.environ[children.TEST_ENV] = item.nodeid
        self._write_running(item.nodeid)
        try:
            yield
        finally:
            os.environ.pop(children.TEST_ENV, None)
            self._write_running(None)

    def _write_running(self, test: str | None) -> None:
        if self._running_path is None:
            return
        self._running_path.write_text(json.dumps({
            "test": test, "started_s": time.time(), "pid": os.getpid(),
            "timeout_plugin": self._timeout_plugin}), encoding="utf-8")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: Any):
        yield
        # Appended before the teardown report is made, so it travels with it
        # (through xdist too).
        loops, reached = RECORDER.take()
        item.user_properties.append((_LOOPS_PROPERTY, loops))
        item.user_properties.append((_REACHED_PROPERTY, reached))
        bases = {name: RECORDER.bases[name] for name in loops if name in RECORDER.bases}
        if bases:
            item.user_properties.append((_BASES_PROPERTY, bases))
            item.user_properties.append((_OVERRIDES_PROPERTY, {
                name: RECORDER.overrides.get(name, []) for name in bases}))
        records = self.children.channel.read(item.nodeid) if self.children else []
        if records:
            item.user_properties.append((_CHILD_PROPERTY, children.merge(records)))

    # Exclusions.

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        if self.select is not None:
            unselected = [i for i in items if i.nodeid not in self.select]
            if unselected:
                config.hook.pytest_deselected(items=unselected)
                items[:] = [i for i in items if i.nodeid in self.select]
        if not self.excludes:
            return
        kept = []
        for item in items:
            reason = _match_exclude(item.nodeid, self.excludes)
            if reason is None:
                kept.append(item)
            else:
                self.excluded[item.nodeid] = reason
        if self.excluded:
            config.hook.pytest_deselected(
                items=[i for i in items if i.nodeid in self.excluded])
            items[:] = kept
        if self.report_path and self.is_worker:
            worker = self.config.workerinput["workerid"]  # type: ignore[attr-defined]
            path = Path(f"{self.report_path}.excluded-{worker}.json")
            path.write_text(json.dumps(self.excluded), encoding="utf-8")

    # Progress, on the controlling process: how many tests this run has
    # (the runner shows "n of N tests"); a worker's count under xdist.

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # Not called on an xdist controller, which collects nothing itself.
        self._write_collected(len(session.items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self._write_collected(len(ids))

    def _write_collected(self, count: int) -> None:
        if self.report_path and not self.is_worker:
            Path(self.report_path + ".collected").write_text(str(count), encoding="utf-8")

    # Outcomes, on the controlling process.

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_worker:
            return
        entry = self.tests.setdefault(
            report.nodeid, {"outcome": None, "loops": [], "reached": False,
                            "duration_s": 0.0})
        entry["duration_s"] = round(entry["duration_s"] + (report.duration or 0.0), 4)
        outcome = _phase_outcome(report)
        if outcome is not None and _OUTCOME_RANK[outcome] >= _OUTCOME_RANK.get(
                entry["outcome"], -1):
            entry["outcome"] = outcome
            if report.failed:
                entry["message"] = _short_message(report)
                entry["detail"] = _failure_lines(report)
            elif outcome in ("skipped", "xfailed"):
                entry["message"] = _skip_reason(report)
        properties: list[tuple[str, Any]] = list(report.user_properties)
        for key, value in properties:
            if key == _LOOPS_PROPERTY:
                entry["loops"] = sorted(set(entry["loops"]) | set(value))
            elif key == _REACHED_PROPERTY:
                entry["reached"] = entry["reached"] or bool(value)
            elif key == _BASES_PROPERTY:
                self.loop_bases.update(value)
            elif key == _OVERRIDES_PROPERTY:
                self.loop_overrides.update(value)
            elif key == _CHILD_PROPERTY:
                self._add_children(entry, value)
        if report.when in ("teardown", "???") or outcome == "crashed":
            if self._jsonl is not None:
                self._jsonl.write(json.dumps({"test": report.nodeid, **entry}) + "\n")
                self._jsonl.flush()

    def _add_children(self, entry: dict[str, Any], child: dict[str, Any]) -> None:
        """Counts a test's children's loops as the test's own."""
        entry["loops"] = sorted(set(entry["loops"]) | set(child["loops"]))
        entry["reached"] = entry["reached"] or child["reached"]
        if child["loops"]:
            entry["child_loops"] = sorted(set(entry.get("child_loops", [])) |
                                          set(child["loops"]))
        if child["errors"]:
            entry["child_errors"] = sorted(set(entry.get("child_errors", [])) |
                                           set(child["errors"]))
        self.loop_bases.update(child["bases"])
        self.loop_overrides.update(child["overrides"])

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # A module that cannot be collected (an import error): pytest stops
        # before any test runs, unless told to go on.
        if report.failed and not self.is_worker:
            self.collect_errors.append({"nodeid": report.nodeid,
                                        "lines": _failure_lines(report, limit=12)})

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            return
        pids: dict[str, str] = {}
        if self.children is not None:
            # Children that outlived their test's end wrote after it was
            # counted: they count all the same.
            by_test: dict[str, list[dict[str, Any]]] = {}
            for record in self.children.channel.read_all():
                by_test.setdefault(record["test"], []).append(record)
                pids[str(record.get("pid"))] = record["test"]
            for test, records in by_test.items():
                if test in self.tests:
                    self._add_children(self.tests[test], children.merge(records))
        # The summary is counted whether or not a report is written: the
        # terminal line that says how many tests ran on the loop is the proof
        # a plain `pytest -p zloop.testing` run gets.
        report = build_report(
            self.tests, self.excluded, loop=self.loop, backend=self.backend,
            label=_setting(self.config, "zloop_label")[0],
            wall_s=time.time() - self.started_s, exitstatus=int(exitstatus))
        self.config.stash[_SUMMARY_KEY] = report["summary"]
        if not self.report_path:
            return
        if self._jsonl is not None:
            self._jsonl.close()
        for path in Path(self.report_path).parent.glob(
                Path(self.report_path).name + ".excluded-*.json"):
            self.excluded.update(json.loads(path.read_text(encoding="utf-8")))
            path.unlink()
        report["excluded"] = dict(self.excluded)
        report["summary"]["excluded"] = len(self.excluded)
        report["loop_bases"] = dict(sorted(self.loop_bases.items()))
        report["loop_overrides"] = dict(sorted(self.loop_overrides.items()))
        report["collect_errors"] = self.collect_errors
        # pid -> test, for the processes that wrote: the runner names the
        # test that started a process still running when pytest should exit.
        report["child_pids"] = pids
        Path(self.report_path).write_text(json.dumps(report, indent=1, sort_keys=True),
                                          encoding="utf-8")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        summary = self.config.stash.get(_SUMMARY_KEY, None)
        if summary is None:
            return
        where = f"; report: {self.report_path}" if self.report_path else ""
        terminalreporter.write_line(
            f"zloop.testing: {summary['on_loop']} of {summary['ran']} tests ran on the "
            f"{self.loop} event loop{where}")


_STATE_KEY = pytest.StashKey[_State]()
# option -> (flag, ini name): the earlier spellings this run accepts.
_OLD_KEY = pytest.StashKey[dict]()
_SUMMARY_KEY = pytest.StashKey[dict]()

# When phases disagree, the worst wins: a test that passed its call and then
# failed its teardown is an error.
_OUTCOME_RANK = {"passed": 0, "skipped": 1, "xfailed": 2, "xpassed": 3, "failed": 4,
                 "error": 5, "crashed": 6}


def _phase_outcome(report: pytest.TestReport) -> str | None:
    xfail = hasattr(report, "wasxfail")
    if report.when not in ("setup", "call", "teardown"):
        # xdist's report for a test whose worker died: a hang killed by
        # pytest-timeout's thread method, or a crash.
        return "crashed" if report.failed else None
    if report.when == "call":
        if report.passed:
            return "xpassed" if xfail else "passed"
        if report.skipped:
            return "xfailed" if xfail else "skipped"
        return "failed"
    if report.failed:
        return "error"
    if report.skipped:
        return "skipped"
    return None


def _short_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        text = crash.message
    else:
        text = str(report.longrepr)
    if "Timeout" in (report.longreprtext or "")[-4000:]:
        text = "Timeout: " + text
    return text.strip().splitlines()[0][:300] if text.strip() else ""


def _failure_lines(report: pytest.TestReport | pytest.CollectReport,
                   limit: int = 8) -> list[str]:
    """The first lines that say why a test failed: where it failed and
    pytest's ``E`` lines (the exception and its explanation), else the end
    of the traceback text."""
    text = report.longreprtext or ""
    lines = [line[:200] for line in text.splitlines() if line.startswith("E ")]
    if not lines:
        lines = [line[:200] for line in text.strip().splitlines()[-limit:]]
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        path = str(crash.path)
        if path.startswith(os.getcwd() + os.sep):
            path = os.path.relpath(path)
        lines.insert(0, f"{path}:{crash.lineno}")
    return lines[:limit]


def _skip_reason(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return str(report.wasxfail)[:300]
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return str(report.longrepr[2])[:300]
    return ""


def _load_excludes(path: str | None) -> list[tuple[str, str]]:
    if not path:
        return []
    entries = json.loads(Path(path).read_text(encoding="utf-8"))
    return [(entry["test"], entry["reason"]) for entry in entries]


def _load_select(path: str | None) -> set[str] | None:
    if not path:
        return None
    return set(json.loads(Path(path).read_text(encoding="utf-8")))


def _match_exclude(nodeid: str, excludes: list[tuple[str, str]]) -> str | None:
    for pattern, reason in excludes:
        if glob_match(nodeid, pattern):
            return reason
    return None


def glob_match(nodeid: str, pattern: str) -> bool:
    """Whether a test id matches a pattern where only ``*`` and ``?`` are wild.

    Brackets are literal: test ids carry parameters in them (``test_x[h11]``).
    """
    if "*" not in pattern and "?" not in pattern:
        return nodeid == pattern
    regex = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.fullmatch(regex, nodeid, re.DOTALL) is not None


def build_report(tests: dict[str, dict[str, Any]], excluded: dict[str, str], *, loop: str,
                 backend: str | None, label: str | None, wall_s: float,
                 exitstatus: int | None) -> dict[str, Any]:
    """The JSON report: metadata, per-test outcomes and the swap count
    (``on_loop``: the tests that ran on the run's loop through the swap)."""
    counts: dict[str, int] = {}
    on_loop = 0
    ran = 0
    for entry in tests.values():
        outcome = entry["outcome"] or "unknown"
        counts[outcome] = counts.get(outcome, 0) + 1
        if outcome not in ("skipped", "unknown"):
            ran += 1
        if swap_reached(entry, loop):
            on_loop += 1
    return {
        "format": "zloop.testing/1",
        "loop": loop,
        "backend": backend,
        "label": label,
        "python": "{}.{}.{}".format(*sys.version_info[:3]),
        "implementation": sys.implementation.name,
        "wall_s": round(wall_s, 1),
        "exitstatus": exitstatus,
        "summary": {"counts": counts, "collected": len(tests), "ran": ran,
                    "on_loop": on_loop, "excluded": len(excluded)},
        "excluded": excluded,
        "tests": tests,
    }
