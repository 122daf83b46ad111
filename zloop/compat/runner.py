"""Running a pytest suite on one loop through ``zloop.testing``, and judging the run.

Both the pinned suites (``python -m zloop.compat run``) and a project's own
suite (``python -m zloop.compat check``) run here: one pytest process per
loop, its output kept in a log beside the report (shown as it comes, or as
a progress line), the report loaded, the run checked for having taken place
on its loop, diffed against the stock-asyncio baseline, and the differing
tests run again on both loops to tell flaky tests from real differences.

The runner adds nothing to pytest's command line that a project's
configuration could refuse: the runner's own settings (reruns, xdist
workers, the per-test timeout) travel as ``zloop.testing`` options and are
applied from inside pytest, and the cache plugin stays on, pointed at a
directory of the run's own.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from zloop.compat import procs, report
from zloop.compat.suites import Suite, SuiteError

LOOPS = ("asyncio", "uvloop", "zloop")


def backend_names() -> tuple[str, ...]:
    """The zloop backends this build has (``zloop.BACKENDS``)."""
    import zloop

    return tuple(zloop.BACKENDS)


def python_tag() -> str:
    return "{}.{}".format(*sys.version_info[:2])


def run_label(loop: str, backend: str | None) -> str:
    return loop + (f" ({backend})" if backend else "")


@dataclass(frozen=True)
class Limits:
    """The check's own limits on its pytest runs (``check --help``,
    "limits"): a test may run ``test_s`` seconds (twice that, and a minute,
    where pytest-timeout is active with the same limit: it ends the test
    itself, and the run goes on), and pytest must exit ``test_s`` seconds
    after its last test; every run ends by ``deadline`` (``time.monotonic()``),
    ``total_s`` after the check began."""

    test_s: float
    total_s: float
    deadline: float


class LimitHit(Exception):
    """A run that one of the check's limits ended, its processes killed:
    what happened, the run, and the test that ran (if one did)."""

    def __init__(self, said: str, label: str, test: str | None,
                 ended: list[procs.Process], started_by: dict[int, str]) -> None:
        super().__init__(said)
        self.said = said
        self.label = label
        self.test = test
        self.ended = ended
        self.started_by = started_by  # pid -> the test that started it, where known


# --- one pytest run --------------------------------------------------------------


def run_pytest(suite: Suite, run_root: Path, loop: str, backend: str | None,
               out_path: Path, args: argparse.Namespace,
               select: list[str] | None = None) -> int:
    """Runs the suite on ``loop`` (only the ``select``ed tests, when given),
    writing the report to ``out_path`` and pytest's output to
    ``log_path(out_path)``; returns pytest's exit status. The output is
    shown as it comes when ``args.verbose`` (the pinned suites' runs),
    else as one progress line. With ``args.limits`` (the check's), a run
    that passes one is ended and ``LimitHit`` raised; without, a run past
    the suite's wall limit is ended, and returns -1. Processes the tests left
    running when pytest exited are ended either way."""
    limits: Limits | None = getattr(args, "limits", None)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    for stale in (out_path, Path(f"{out_path}.jsonl"), Path(f"{out_path}.collected"),
                  *_running_files(out_path)):
        stale.unlink(missing_ok=True)
    command = _pytest_command(suite, run_root, loop, backend, out_path, args, select)
    env = _env_with_zloop(str(suite.directory), str(out_path.parent / "plugin"))
    env["ZLOOP_COMPAT_SUITE_DIR"] = str(suite.directory)
    if backend:
        env["ZLOOP_BACKEND"] = backend
    verbose = getattr(args, "verbose", True)
    label = f"{suite.name} on {run_label(loop, backend)}"
    what = f"{len(select)} test(s) again" if select is not None else "the suite"
    if verbose:
        print(f"compat: running {what} on {run_label(loop, backend)}, Python {python_tag()}, "
              f"in {run_root}", flush=True)
        print("compat: $ " + " ".join(command), flush=True)
    started = time.monotonic()
    log = log_path(out_path)
    with open(log, "w", encoding="utf-8", errors="replace") as log_file:
        # Its own process group, so that a run past the wall limit is ended whole.
        proc = subprocess.Popen(command, cwd=run_root, env=env, start_new_session=True,
                                preexec_fn=_default_interrupt_signals,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        copier = threading.Thread(target=_copy_output,
                                  args=(proc.stdout, log_file, sys.stdout if verbose else None),
                                  daemon=True)
        copier.start()
        progress = None if verbose else _Progress(f"{run_label(loop, backend)}"
                                                  + (" rerun" if select is not None else ""),
                                                  out_path, started)
        try:
            rc = _wait(proc, suite.wall_limit_s, run_label(loop, backend), progress,
                       out_path, limits)
        except LimitHit:
            if progress is not None:
                progress.finish(-1)
            raise
        finally:
            left = procs.end(proc.pid, settle_s=2.0)
            # A process outside the group may still hold the pipe: the rest
            # of the output is not worth waiting for.
            copier.join(timeout=10)
        if left:
            print(f"\ncompat: {label}: {len(left)} process(es) that the tests started were "
                  "still running when pytest exited; ended: "
                  + "; ".join(f"pid {p.pid} ({p.command[:100]})" for p in left[:5]),
                  flush=True)
    elapsed_s = time.monotonic() - started
    if progress is not None:
        progress.finish(rc)
    else:
        print(f"compat: {label} finished in {elapsed_s:.0f} s (pytest exit {rc})", flush=True)
    if not verbose and (rc not in (0, 1) or not out_path.exists()):
        show_log_excerpt(log, command)
    return rc


def log_path(out_path: Path) -> Path:
    return out_path.with_suffix(".log")


def _copy_output(source: IO[bytes], log: IO[str], echo: IO[str] | None) -> None:
    for raw in iter(source.readline, b""):
        line = raw.decode("utf-8", "replace")
        log.write(line)
        if echo is not None:
            echo.write(line)
            echo.flush()
    log.flush()


def _wait(proc: subprocess.Popen[bytes], wall_limit_s: float, label: str,
          progress: _Progress | None, out_path: Path, limits: Limits | None) -> int:
    deadline = time.monotonic() + wall_limit_s if limits is None else limits.deadline
    while True:
        try:
            return proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        if progress is not None:
            progress.update()
        said, test = (None, None) if limits is None else _past_limit(out_path, limits)
        if said is not None:
            break
        if time.monotonic() > deadline:
            break
    if limits is None:
        print(f"\ncompat: the run on {label} passed its wall limit of {wall_limit_s:.0f} s; "
              "ending it", flush=True)
        procs.end(proc.pid, grace_s=30)
        proc.wait()
        return -1
    if said is None:
        running = [t for t, _ in _running_tests(out_path)]
        test = running[0] if running else None
        said = (f"the check passed its overall limit of {limits.total_s:.0f} s "
                "(--total-timeout)" + (f", while {', '.join(running)} ran" if running else ""))
    ended = procs.end(proc.pid)
    proc.wait()
    raise LimitHit(said, label, test, ended, _started_by(out_path))


def _started_by(out_path: Path) -> dict[int, str]:
    """pid -> test, for the child processes that told zloop.testing which
    test started them: from the report, else from their records."""
    try:
        pids = json.loads(out_path.read_text(encoding="utf-8")).get("child_pids", {})
        return {int(pid): test for pid, test in pids.items()}
    except (OSError, ValueError):
        pass
    from zloop.compat.children import Channel

    records = Channel(Path(f"{out_path}.children") / "records").read_all()
    return {int(r["pid"]): r["test"] for r in records if "pid" in r}


def _running_files(out_path: Path) -> list[Path]:
    return sorted(out_path.parent.glob(out_path.name + ".running-*"))


def _running_state(out_path: Path) -> list[dict[str, Any]]:
    """What each process that runs tests runs now (see zloop.testing): a
    test and since when, or none since when; the processes that are gone
    (an xdist worker that a timeout ended) left out."""
    states = []
    for path in _running_files(out_path):
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # being written
        if procs.alive(int(state.get("pid", 0))):
            states.append(state)
    return states


def _running_tests(out_path: Path) -> list[tuple[str, float]]:
    """The tests that run now, and for how long, in seconds."""
    now = time.time()
    return [(s["test"], now - s["started_s"]) for s in _running_state(out_path) if s["test"]]


def _past_limit(out_path: Path, limits: Limits) -> tuple[str | None, str | None]:
    """Whether a test ran past the per-test limit, or pytest did not exit
    that long after its last test: what to say, and the test."""
    states = _running_state(out_path)
    now = time.time()
    for state in states:
        if not state["test"]:
            continue
        own = not state.get("timeout_plugin")
        limit_s = limits.test_s if own else limits.test_s * 2 + 60
        ran_s = now - state["started_s"]
        if ran_s > limit_s:
            why = ("the per-test limit (--timeout; no pytest-timeout in this run)" if own else
                   "twice the per-test limit and a minute: pytest-timeout did not end it")
            return (f"{state['test']} ran for {ran_s:.0f} s, past {why}; it hangs, or "
                    "needs a longer --timeout", state["test"])
    # Since when nothing has run: the last test's end in every process that
    # runs tests, or the report, which the session writes as it ends.
    idle = []
    if states and all(not s["test"] for s in states):
        idle.append(now - max(s["started_s"] for s in states))
    try:
        idle.append(now - out_path.stat().st_mtime)
    except OSError:
        pass
    if idle and Path(f"{out_path}.collected").exists():
        idle_s = min(idle)
        if idle_s > limits.test_s:
            return (f"pytest had not exited {idle_s:.0f} s after its last test ended (the "
                    "per-test limit, --timeout): it waits on something a test started and "
                    "did not end, such as a process it never joined or a thread that is not "
                    "a daemon", None)
    return None, None


class _Progress:
    """One line per run: which loop, how many tests are done (of how many),
    how long it has taken. Rewritten in place on a terminal; elsewhere
    (a log, CI) printed once a minute and at the end."""

    INTERVAL_S = 60.0

    def __init__(self, label: str, out_path: Path, started: float) -> None:
        self.label = label
        self.jsonl = Path(f"{out_path}.jsonl")
        self.collected = Path(f"{out_path}.collected")
        self.started = started
        self.tty = sys.stdout.isatty()
        self.printed_at = started
        self.update()

    def _done(self) -> int:
        try:
            with open(self.jsonl, "rb") as f:
                return f.read().count(b"\n")
        except FileNotFoundError:
            return 0

    def _text(self) -> str:
        try:
            of = f" of {int(self.collected.read_text(encoding='utf-8'))}"
        except (FileNotFoundError, ValueError):
            of = ""
        elapsed_s = time.monotonic() - self.started
        return f"compat: {self.label}: {self._done()}{of} tests done, {elapsed_s:.0f} s"

    def update(self) -> None:
        now = time.monotonic()
        if self.tty:
            print("\r" + self._text() + "\033[K", end="", flush=True)
        elif now - self.printed_at >= self.INTERVAL_S:
            print(self._text(), flush=True)
            self.printed_at = now

    def finish(self, rc: int) -> None:
        end = "\r" if self.tty else ""
        print(f"{end}{self._text()} (pytest exit {rc}: {pytest_exit_meaning(rc)})"
              + ("\033[K" if self.tty else ""), flush=True)


def show_log_excerpt(log: Path, command: list[str], lines: int = 25) -> None:
    """The part of a failed run's output that says why, with the command
    that ran: its first error (which a coverage table or a page of warnings
    at the end would hide), else its end."""
    text = log.read_text(encoding="utf-8", errors="replace").splitlines()
    print("compat: $ " + " ".join(command))
    where = first_error(text, lines)
    if where is None:
        if len(text) > lines:
            print(f"compat: ... the last {lines} of {len(text)} lines of pytest's output "
                  "(all of it: check -v):")
        shown = [(i, text[i]) for i in range(max(0, len(text) - lines), len(text))]
    else:
        print(f"compat: pytest's first error, from its output of {len(text)} lines "
              "(all of it: check -v):")
        shown = [(i, text[i]) for i in where]
    previous = None
    for i, line in shown:
        if previous is not None and i != previous + 1:
            print("  | ...")
        print(f"  | {line}")
        previous = i


# The first line of an error in pytest's output: a section that reports one
# ("____ ERROR collecting x.py ____"), a conftest or module that does not
# import, an internal error, pytest's own "ERROR: ...", or an exception line
# ("E   ModuleNotFoundError: ...").
_ERROR_START = re.compile(r"^(?:_+ ERROR\b|ImportError while|INTERNALERROR>|ERROR: |E\s{2,}\S)")


def _is_title(line: str) -> bool:
    return line.startswith(("____", "===="))


def first_error(text: list[str], lines: int = 25) -> list[int] | None:
    """The indices of the lines that show the first error in pytest's
    output, at most ``lines`` of them (the first five and the last, when
    there are more): a section from its title to the end of its first
    ``E`` lines, a block of ``INTERNALERROR>`` lines, or an ``ERROR:``
    paragraph. None when no line shows an error."""
    at = next((i for i, line in enumerate(text) if _ERROR_START.match(line)), None)
    if at is None:
        return None
    start = end = at
    if text[at].startswith("INTERNALERROR>"):
        while end + 1 < len(text) and text[end + 1].startswith("INTERNALERROR>"):
            end += 1
    elif text[at].startswith("ERROR: "):
        while end + 1 < len(text) and text[end + 1].strip() and end - at < lines:
            end += 1
    else:
        if text[at].startswith("E "):
            # The section's title, when it is near.
            start = next((i for i in range(at, max(-1, at - 60), -1)
                          if _is_title(text[i])), at)
        first_e = next((i for i in range(at, len(text))
                        if text[i].startswith("E ") or (i > at and _is_title(text[i]))),
                       len(text))
        if first_e < len(text) and text[first_e].startswith("E "):
            end = first_e
            while end + 1 < len(text) and text[end + 1].startswith("E "):
                end += 1
        else:
            end = min(first_e, len(text)) - 1
    span = list(range(start, end + 1))
    if len(span) > lines:
        span = span[:5] + span[-(lines - 5):]
    return span


def _pytest_command(suite: Suite, run_root: Path, loop: str, backend: str | None,
                    out_path: Path, args: argparse.Namespace,
                    select: list[str] | None = None) -> list[str]:
    python = python_tag()
    exclude_path = out_path.with_suffix(".exclude.json")
    exclude_path.write_text(json.dumps([
        {"test": e.test, "reason": e.reason} for e in suite.excludes_for(python, backend)]))
    jobs = suite.jobs if args.jobs is None else args.jobs
    # Options as --name=value: pytest takes a bare argument that names an
    # existing path as a hint for its rootdir, and the report paths exist.
    command = [sys.executable, "-m", "pytest", "-p", _plugin_module(loop, out_path.parent),
               f"--zloop-loop={loop}", f"--zloop-report={out_path}",
               f"--zloop-exclude={exclude_path}", f"--zloop-label={suite.pin}",
               f"--zloop-jobs={jobs}",
               f"--zloop-timeout={args.timeout or suite.timeout_s}",
               "--zloop-complete=yes"]
    if backend:
        command += [f"--zloop-backend={backend}"]
    if select is not None:
        select_path = out_path.with_suffix(".select.json")
        select_path.write_text(json.dumps(sorted(select)), encoding="utf-8")
        command += [f"--zloop-select={select_path}"]
    for plugin in suite.plugins:
        command += ["-p", plugin]
    # The cache plugin stays on (a project's --lf, --sw or --cache-clear
    # need it), with a cache of this run's own: one run's failures must not
    # pick the next run's tests.
    command += ["-o", f"cache_dir={out_path.parent / 'cache' / out_path.stem}", "-q"]
    if not suite.is_local:
        # A pinned suite runs from its extracted tree, which is its rootdir;
        # a project's own suite finds its rootdir as plain pytest does.
        command += [f"--rootdir={run_root}"]
        # Its expected differences were found with the interpreters its
        # tests start on stock asyncio: reaching them (zloop.compat.children)
        # is a change to each suite's list, made when the suite is rerun so.
        command += ["--zloop-children=no"]
    return [*command, *suite.pytest_args, *suite.targets, *args.pytest_args]


def _plugin_module(loop: str, scratch: Path) -> str:
    """``zloop.testing``, or the same file as a top-level module when zloop is
    not importable (not built yet) and the run does not need it."""
    probe = subprocess.run([sys.executable, "-c", "import zloop"], capture_output=True,
                           env=_env_with_zloop())
    if probe.returncode == 0 or loop == "zloop":
        return "zloop.testing"
    alias_dir = scratch / "plugin"
    alias_dir.mkdir(parents=True, exist_ok=True)
    alias = alias_dir / "zloop_testing.py"
    alias.unlink(missing_ok=True)
    alias.symlink_to(Path(os.path.abspath(__file__)).parents[1] / "testing.py")
    print("compat: zloop is not importable here; loading zloop/testing.py as zloop_testing",
          flush=True)
    return "zloop_testing"


def _env_with_zloop(*extra: str) -> dict[str, str]:
    """The environment for pytest: the zloop (and zloop.testing) that this
    runner itself was imported from, then the given directories."""
    env = dict(os.environ)
    paths = [str(Path(os.path.abspath(__file__)).parents[2]), *extra]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _default_interrupt_signals() -> None:
    """In the pytest child, before exec: SIGINT, SIGQUIT and SIGHUP back to
    their defaults. A non-interactive shell starts background jobs (`cmd &`,
    CI steps) with SIGINT and SIGQUIT ignored, nohup ignores SIGHUP, and an
    ignored disposition survives exec: a Python started with SIGINT ignored
    never raises KeyboardInterrupt, and a child sent SIGHUP does not die.
    The suites' tests that signal a child process (uvloop's test_signals and
    test_send_signal, on every loop alike) would hang instead of testing
    anything. Safe: the child leads its own session, which no terminal's
    hang-up reaches."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


_PYTEST_EXITS = {0: "all passed", 1: "some tests failed", 2: "interrupted",
                 3: "pytest's internal error",
                 4: "usage error: pytest's message is above",
                 5: "no tests collected: run it where you run pytest, or name the tests"}


def pytest_exit_meaning(rc: int) -> str:
    if rc < 0:
        return "ended by the runner or a signal"
    return _PYTEST_EXITS.get(rc, "not a test failure")


# Causes of a failed run that the runner can name, found in pytest's output:
# (a pattern that shows it, what to say). The first that matches is said.
KNOWN_CAUSES = (
    (re.compile(r'INTERNALERROR>.*"asyncio_default_fixture_loop_scope" is unset'),
     "pytest-asyncio warns that asyncio_default_fixture_loop_scope is unset, and the "
     "project's filterwarnings = error turns that warning into an internal error: plain "
     "pytest fails the same way here. Set it in the project's pytest configuration "
     "(asyncio_default_fixture_loop_scope = function), or pass it to this run: "
     "`python -m zloop.compat check -- -o asyncio_default_fixture_loop_scope=function` "
     "(docs/validate.md in zloop's repository: \"pytest-asyncio\")"),
)


def known_cause(out_path: Path) -> str | None:
    """What made a run fail, when its output shows a cause the runner knows."""
    try:
        text = log_path(out_path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    return next((say for sign, say in KNOWN_CAUSES if sign.search(text)), None)


# A line of pytest's output that says what went wrong: an exception
# (``E   ModuleNotFoundError: ...``, ``argparse.ArgumentError: ...``, after
# ``INTERNALERROR>`` or not) or pytest's own ``ERROR: ...``.
_ERROR_LINE = re.compile(r"^(?:INTERNALERROR>\s*)?(?:E\s+)?((?:[A-Za-z_][\w.]*"
                         r"(?:Error|Exception|Warning|Exit|Failure)\b|ERROR\b).*)$")


def last_error_line(out_path: Path) -> str | None:
    """The last line of a run's output that names an error, if one does."""
    try:
        text = log_path(out_path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    for line in reversed(text.splitlines()):
        match = _ERROR_LINE.match(line.strip())
        if match:
            return match.group(1).strip()[:300]
    return None


def load_run(path: Path, rc: int) -> dict[str, Any]:
    """The report of a pytest run, or an error that says why there is none:
    when pytest stopped before it collected a test (a conftest that does
    not load, an option the suite defines twice), with pytest's own last
    error line."""
    try:
        return report.load_report(path)
    except FileNotFoundError:
        cause = known_cause(path)
        if not Path(f"{path}.collected").exists():
            error = last_error_line(path)
            # Status 1 says "some tests failed", which none did here.
            meaning = "an error before any test" if rc == 1 else pytest_exit_meaning(rc)
            said = (f"pytest stopped before it collected any test: it exited with status "
                    f"{rc} ({meaning})"
                    + (f", on: {error}" if error else "")
                    + "; no test ran on either loop, and plain pytest with -p zloop.testing "
                    "stops the same way (the end of its output is above)")
        else:
            said = (f"pytest wrote no report ({path}): it exited with status {rc} "
                    f"({pytest_exit_meaning(rc)}); its output is above")
        raise SuiteError(said + (f".\n{cause}" if cause else "")) from None


# --- judging a run -----------------------------------------------------------------


@dataclass
class Verdict:
    """One run judged: its table row, its differences from the baseline
    (None for the baseline itself) and what fails it."""

    row: dict[str, Any]
    diff: report.DiffResult | None
    problems: list[str]


def judge(suite: Suite, args: argparse.Namespace, loop: str, backend: str | None,
          result: dict[str, Any], baseline: dict[str, Any] | None, out_path: Path, rc: int,
          run_root: Path, rounds: int = 1, reached_only: bool = False,
          require_loop: bool = True, rerun_max: int | None = None) -> Verdict:
    """Checks that a run took place on its loop, diffs it against the
    baseline and confirms the unlisted differences by rerunning them.
    ``reached_only``: compare only the tests that the swap reached (see
    ``report.diff_reports``). ``require_loop=False``: the caller explains a
    run in which no test ran its loop itself. ``rerun_max``: rerun at most
    this many differences (default ``RERUN_MAX``)."""
    python = python_tag()
    min_on_loop = suite.min_on_loop_for(python)
    on_loop = result["summary"]["on_loop"]
    swap_ok = on_loop >= max(1, min_on_loop) or not require_loop
    problems = []
    if rc not in (0, 1):
        problems.append(f"pytest ended with exit status {rc} ({pytest_exit_meaning(rc)})")
        cause = known_cause(out_path)
        if cause:
            problems.append(cause)
    if result.get("partial"):
        problems.append("the run was cut short; the report is partial")
    if not swap_ok:
        problems.append(f"{on_loop} tests ran on a loop of {loop}'s kind; "
                        f"at least {max(1, min_on_loop)} must")
    diff = None
    if baseline is not None:
        expected = suite.expected_for(loop, python, backend)
        diff = report.diff_reports(baseline, result, expected,
                                   loop=loop if reached_only else None)
        confirm(suite, args, loop, backend, diff, out_path, run_root, rounds,
                RERUN_MAX if rerun_max is None else rerun_max)
    row = report.summary_row(suite.name, suite.pin, loop, backend, result, diff,
                             swap_ok, min_on_loop)
    if problems and row["status"] == "ok":
        row["status"] = "run failed"
    return Verdict(row, diff, problems)


# At most this many unlisted differences of a pinned suite are run again to
# confirm them; more than that is no flake.
RERUN_MAX = 20


def confirm(suite: Suite, args: argparse.Namespace, loop: str, backend: str | None,
            diff: report.DiffResult, out_path: Path, run_root: Path, rounds: int = 1,
            rerun_max: int = RERUN_MAX) -> None:
    """Runs the tests behind unlisted differences again on both loops,
    ``rounds`` times, and drops each difference that does not reproduce in
    every round (timing-dependent tests that failed once on one side, stock
    asyncio's included). A rerun is the first run's command with the same
    arguments (paths included), selecting those tests."""
    for _ in range(rounds):
        tests = [d.test for d in diff.unlisted]
        if not tests or len(tests) > rerun_max:
            if tests:
                print(f"compat: {len(tests)} unlisted differences, more than the "
                      f"{rerun_max} that are run again: none is", flush=True)
            return
        print(f"compat: running the {len(tests)} unlisted difference(s) again on both loops",
              flush=True)
        reruns = {}
        for rerun_loop, rerun_backend in (("asyncio", None), (loop, backend)):
            path = out_path.with_name(f"{out_path.stem}.rerun-{rerun_loop}.json")
            rc = run_pytest(suite, run_root, rerun_loop, rerun_backend, path, args, tests)
            reruns[rerun_loop] = load_run(path, rc)
        report.drop_unconfirmed(diff, reruns["asyncio"], reruns[loop])
