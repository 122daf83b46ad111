"""``python -m zloop.compat check``: does this project behave the same on another loop?

Run in a project's directory (where its pytest suite runs, or any directory
below it), with zloop and pytest installed, it runs the suite once on stock
asyncio (the baseline) and once per other loop (and zloop backend), each
through the ``zloop.testing`` plugin, which swaps the loop behind
``asyncio.new_event_loop()`` and records the loops each test ran. A run in
which no test ran its loop fails, rather than passing as a silent run on
asyncio. It diffs each run against the baseline test by test, counting
only the tests that the swap reached (a test that ran no event loop, such as
AnyIO's trio half, or only a loop class of the project's own, cannot show a
loop difference), runs the tests whose outcome differs again on both loops
(``--reruns`` rounds, with the same arguments) to tell timing-dependent
tests from real differences, and prints one table and each difference with
the first lines of its failure.

Exit status: 0 when every difference is listed, with its reason, in the
``--expected`` file (the format of ``compat/SUITE/expected.toml``); 1 when
one is not, or a run failed; 2 on a usage error, or when pytest stopped
before collecting a test; 3 when the swap reached no test (the suite runs no
loop, or only loops it chose itself, such as its own loop class), so that
nothing was compared; 4 when too little was compared for a verdict (more
than half of the tests errored or were skipped on both loops, or fewer than
a tenth were compared). It uses pytest-xdist and pytest-timeout when the
project's runs have them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from zloop.compat import report
from zloop.compat.internals import depends_on_internals
from zloop.compat.runner import (LOOPS, LimitHit, Limits, Verdict, backend_names, judge,
                                 load_run, run_label, run_pytest)
from zloop.compat.suites import Suite, SuiteError, load_expected

# Defaults for a project's own suite, which has no suite.toml to say them.
DEFAULT_JOBS = 2
DEFAULT_TIMEOUT_S = 120  # a test (and pytest's exit after its last test)
DEFAULT_TOTAL_TIMEOUT_S = 7200  # the whole check, every run and rerun

# A project's own differences are run again up to this many: a real difference
# shared by many tests (one cause) must not keep the flaky ones from their
# reruns, and a rerun of a few hundred tests costs little beside a full run.
RERUN_MAX = 300

# The exit status when the swap reached no test: nothing was compared.
EXIT_NOT_REACHED = 3
# The exit status when too little of the suite was compared for a verdict:
# more than this share of the tests errored or were skipped on both loops...
EXIT_TOO_LITTLE = 4
MAX_NOT_RUN_SHARE = 0.5
# ... or fewer than this share of them were compared.
MIN_COMPARED_SHARE = 0.1
# The exit status when one of the check's limits ended it (a test that
# hangs, a pytest that does not exit, the overall limit).
EXIT_LIMIT = 5
# The exit status of a usage error, and of a suite pytest cannot run here.
EXIT_USAGE = 2


# The reference that ``check --help`` prints after the options: what a user
# of an installed zloop has at hand (the longer guide, docs/validate.md, is
# in zloop's source repository).
GUIDE = f"""\
exit status:
  0  no test differs from stock asyncio beyond the ones --expected accepts
  1  one does, or a run on another loop failed
  2  a usage error, or pytest cannot run the suite here: it stopped before
     collecting a test, could not collect a module (its error is quoted), or
     collected none
  3  nothing to compare: the swap reached no test (the suite runs no event
     loop, or only loops it chooses itself, such as its own loop class)
  4  too little compared for a verdict: more than half of the tests errored
     or were skipped on both loops, or fewer than a tenth were compared
  {EXIT_LIMIT}  a limit ended the check (below): it names the test

limits:
  --timeout S (default {DEFAULT_TIMEOUT_S}) bounds each test. Where the project runs
  pytest-timeout, that plugin fails a test that runs longer and the run goes on;
  where it does not, the check ends a test that runs longer, ending the whole
  run (exit {EXIT_LIMIT}), and names it, with what it did on stock asyncio. pytest must
  also exit within S seconds of its last test (a worker process a test never
  joined keeps it waiting). --total-timeout S (default {DEFAULT_TOTAL_TIMEOUT_S}, 0: none) bounds
  the whole check. Ending a run ends every process of its process group and
  session: what a test started, unless it made a session of its own.

child processes:
  A forked child inherits the loop swap. A new Python interpreter that a test
  starts (multiprocessing's spawn and forkserver, subprocess running Python,
  pytester's runpytest_subprocess) gets it from a start-up hook
  (sitecustomize.py) that the plugin puts first on PYTHONPATH, with the test's
  name in $ZLOOP_TESTING_TEST: it swaps the loop once the child imports
  asyncio. Each child's loops count for the test that started it. Not reached:
  interpreters started with -E, -I or -S, or with an environment of their own
  that drops PYTHONPATH, and Pythons that cannot import this zloop (a
  Python that a program of another language starts is reached).
  --zloop-children no (after --) leaves spawned children on stock asyncio.

differences:
  A test that passes on stock asyncio and fails on zloop (or the reverse) is a
  zloop bug to report, unless it depends on stock asyncio's internals: reads
  or writes a private attribute (transport._address, loop._selector), or
  asserts isinstance(x, asyncio.Handle). check says so under such a
  difference. Accept a difference by listing it in a TOML file passed as
  --expected:

      [[zloop]]
      test = "tests/test_io.py::test_from_socket[*]"   # * and ? are wild
      reason = "writes transport._address, a private attribute of asyncio's"

  A test that differs once and not in a rerun is FLAKY, not counted. A test
  that ran no event loop, or only loops it chose itself, is not compared.

the plugin alone:
  pytest -p zloop.testing --zloop-loop zloop   (see pytest --help, "zloop")
"""


def run_check(args: argparse.Namespace) -> int:
    _require("pytest", "pytest is not installed in this environment: pip install pytest")
    loops = _names(args.loops, LOOPS, "--loops")
    backends: list[str | None] = [None]
    if args.backend:
        if "zloop" not in loops:
            raise SuiteError("--backend picks zloop's backends: add zloop to --loops")
        backends = list(_names(args.backend, backend_names(), "--backend"))
    if "uvloop" in loops:
        _require("uvloop", "uvloop is not installed in this environment: pip install uvloop "
                 "(or leave it out of --loops)")
    if args.reruns < 0:
        raise SuiteError("--reruns must be 0 or more")
    if (args.timeout is not None and args.timeout <= 0) or args.total_timeout < 0:
        raise SuiteError("--timeout must be more than 0, --total-timeout 0 (none) or more")
    project = Path.cwd().resolve()
    total_s = float(args.total_timeout or "inf")
    suite = Suite(name=project.name, directory=project, description="", source="local",
                  targets=[], pytest_args=[], jobs=DEFAULT_JOBS, timeout_s=DEFAULT_TIMEOUT_S,
                  wall_limit_s=int(min(total_s, 10**9)), plugins=[], requirements=[],
                  expected=load_expected(args.expected.resolve()) if args.expected else {})
    args.limits = Limits(test_s=float(args.timeout or DEFAULT_TIMEOUT_S), total_s=total_s,
                         deadline=time.monotonic() + total_s)
    runs = [(loop, backend) for loop in loops if loop != "asyncio"
            for backend in (backends if loop == "zloop" else [None])]
    with _results_dir(args.results) as out_dir:
        return _check(suite, args, runs, out_dir)


def _require(module: str, message: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise SuiteError(message)


def _names(text: str, known: tuple[str, ...], option: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SuiteError(f"{option} {text!r}: expected a comma-separated list of "
                         f"{', '.join(known)}")
    return list(dict.fromkeys(names))


@contextlib.contextmanager
def _results_dir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="zloop-check-") as tmp:
        yield Path(tmp)


Checked = tuple[str, str | None, Verdict, dict[str, Any]]


def _check(suite: Suite, args: argparse.Namespace, runs: list[tuple[str, str | None]],
           out_dir: Path) -> int:
    project = suite.directory
    print(f"compat: checking {project}, Python {'.'.join(map(str, sys.version_info[:3]))}: "
          f"stock asyncio, then {', '.join(run_label(*r) for r in runs)}", flush=True)
    base_path = out_dir / "asyncio.json"
    baseline: dict[str, Any] | None = None
    rows: list[dict[str, Any]] = []
    try:
        rc = run_pytest(suite, project, "asyncio", None, base_path, args)
        baseline = load_run(base_path, rc)
        base_verdict = judge(suite, args, "asyncio", None, baseline, None, base_path, rc,
                             project, require_loop=False)
        _split_skips(base_verdict.row, baseline)
        rows.append(base_verdict.row)
        cannot = _cannot_run(baseline, rc, base_path)
        if cannot is not None:
            print(f"compat: CANNOT RUN: {cannot}")
            return _record(args, out_dir, EXIT_USAGE, rows)
        reached = baseline["summary"]["on_loop"] > 0
        if not reached and baseline["summary"]["collected"]:
            own = _own_loop_tests(baseline)
            base_verdict.row["status"] = "not compared" if own else "no loop"
        checked: list[Checked] = []
        if reached and not base_verdict.problems:
            for loop, backend in runs:
                name = f"{loop}-{backend}" if backend else loop
                path = out_dir / f"{name}.json"
                rc = run_pytest(suite, project, loop, backend, path, args)
                result = load_run(path, rc)
                verdict = judge(suite, args, loop, backend, result, baseline, path, rc,
                                project, rounds=args.reruns, reached_only=True,
                                rerun_max=RERUN_MAX)
                _split_skips(verdict.row, result)
                checked.append((loop, backend, verdict, result))
                rows.append(verdict.row)
    except LimitHit as hit:
        _print_limit(hit, baseline)
        return _record(args, out_dir, EXIT_LIMIT, rows)
    status = _print_outcome(suite, baseline, base_verdict, checked, args, out_dir)
    return _record(args, out_dir, status, rows)


def _record(args: argparse.Namespace, out_dir: Path, status: int,
            rows: list[dict[str, Any]]) -> int:
    if args.results:
        # The table and the verdict, for a script that runs check on many
        # projects (scripts/check_projects.py).
        (out_dir / "check.json").write_text(json.dumps(
            {"exit": status, "rows": rows}, indent=1), encoding="utf-8")
    return status


def _cannot_run(baseline: dict[str, Any], rc: int, path: Path) -> str | None:
    """Why pytest could not run the suite here at all, on stock asyncio, if
    it could not: a module it could not collect (pytest then stops before
    any test), or no test collected. Plain pytest fails the same way."""
    errors = baseline.get("collect_errors") or []
    ran = sum(baseline["summary"]["counts"].values())
    if errors and not ran:
        first = errors[0]
        quoted = _quote_error(first["lines"]) or "(pytest printed no error line)"
        return (f"pytest could not collect the suite: {len(errors)} error(s) during "
                f"collection, the first in {first['nodeid'] or 'the session'}: {quoted}. "
                "No test ran on any loop, and plain pytest stops the same way (its first "
                "error is above). Make the suite collect under plain pytest here (install "
                "what its modules import), or name the tests to check after --")
    if rc == 5:
        return ("pytest collected no test (exit status 5): run the check where you run "
                "pytest, or name the tests after --")
    return None


def _quote_error(lines: list[str]) -> str:
    """pytest's own line for an error: its first ``E`` line (the
    exception), else its last line."""
    said = [line for line in lines if line.startswith("E ")]
    line = (said or lines[-1:] or [""])[0]
    return f"`{line[1:].strip() if line.startswith('E ') else line.strip()}`" if line else ""


def _print_limit(hit: LimitHit, baseline: dict[str, Any] | None) -> None:
    """What a limit ended, and what stock asyncio did with that test."""
    print(f"\ncompat: ENDED: {hit.label}: {hit.said}.")
    base = (baseline or {}).get("tests", {}).get(hit.test or "")
    if base and not hit.label.startswith("asyncio"):
        print(f"compat: on stock asyncio, {hit.test} {base['outcome']} in "
              f"{base.get('duration_s', 0):.1f} s: a hang on {hit.label} only is a difference "
              "from stock asyncio")
    if hit.ended:
        print("compat: ended the run's processes: " + "; ".join(
            f"pid {p.pid} ({p.command[:100]})" + (
                f", started by {hit.started_by[p.pid]}" if p.pid in hit.started_by else "")
            for p in hit.ended[:8])
            + (f"; and {len(hit.ended) - 8} more" if len(hit.ended) > 8 else ""))
    print("compat: no verdict: the check ended before it could compare every run "
          f"(exit status {EXIT_LIMIT}; check --help: \"limits\")")


def _split_skips(row: dict[str, Any], result: dict[str, Any]) -> None:
    """check's table counts skipped, xfailed and xpassed tests apart."""
    counts = result["summary"]["counts"]
    for outcome in ("skipped", "xfailed", "xpassed"):
        row[outcome] = counts.get(outcome, 0)


def _own_loop_tests(result: dict[str, Any]) -> dict[str, list[str]]:
    """The tests of a run that ran loops, none of them of a known family
    (asyncio, uvloop, zloop): test -> those loop types."""
    from zloop.testing import loop_family  # imports pytest, which check requires

    return {test: entry["loops"] for test, entry in sorted(result["tests"].items())
            if entry["loops"] and all(loop_family(t) is None for t in entry["loops"])}


def _chosen_loop_tests(result: dict[str, Any]) -> list[str]:
    """The tests of a run that ran only loops they chose themselves, none of
    them a loop class of the project's own: built from a class
    (``asyncio.SelectorEventLoop()``) or by a factory the test names
    (AnyIO's ``loop_factory``)."""
    from zloop.testing import loop_family, swap_reached  # imports pytest

    return sorted(test for test, entry in result["tests"].items()
                  if entry["loops"] and not swap_reached(entry, result["loop"])
                  and any(loop_family(t) is not None for t in entry["loops"]))


@dataclasses.dataclass
class Coverage:
    """How much of the suite a run on another loop compared with the baseline."""

    total: int  # tests in either run, the excluded ones left out
    compared: int  # reached by the swap, and run (not errored or skipped) in a run
    not_run: int  # errored or skipped in both runs
    no_loop: int  # ran no event loop in either run
    chosen: int  # ran only loops they chose themselves, in both runs
    commonest_error: str  # the commonest message of the tests that errored in both

    @property
    def too_little(self) -> bool:
        return self.total > 0 and (self.not_run > self.total * MAX_NOT_RUN_SHARE
                                   or self.compared < self.total * MIN_COMPARED_SHARE)


def how_much_compared(baseline: dict[str, Any], result: dict[str, Any],
                      loop: str) -> Coverage:
    """How much of the suite the run on ``loop`` compared with the baseline."""
    excluded = set(baseline.get("excluded", {})) | set(result.get("excluded", {}))
    tests = (set(baseline["tests"]) | set(result["tests"])) - excluded
    compared = not_run = no_loop = chosen = 0
    errors: Counter[str] = Counter()
    for test in tests:
        base, got = baseline["tests"].get(test), result["tests"].get(test)
        outcomes = {(base or {}).get("outcome"), (got or {}).get("outcome")}
        where = report.reach(base, got, loop)
        if outcomes <= {"error", "skipped"}:
            not_run += 1
            if outcomes == {"error"} and base and _error_text(base):
                errors[_error_text(base)] += 1
        elif where == report.ON_LOOP:
            compared += 1
        elif where == report.NO_LOOP:
            no_loop += 1
        else:
            chosen += 1
    commonest = errors.most_common(1)[0][0] if errors else ""
    return Coverage(len(tests), compared, not_run, no_loop, chosen, commonest)


def _error_text(entry: dict[str, Any]) -> str:
    """What a failed test's report says went wrong: its first ``E`` line
    (``fixture 'event_loop' not found``), else its short message."""
    for line in entry.get("detail", []):
        if line.startswith("E "):
            return line[1:].strip()
    return entry.get("message", "")


def _own_loop_note(own: dict[str, list[str]], bases: dict[str, str]) -> str:
    """``N tests ran on the project's own loop class `pkg.Loop` (a subclass
    of `asyncio.SelectorEventLoop`)``, for each class."""
    classes = Counter(t for loops in own.values() for t in loops)
    described = [f"`{name}` (a subclass of `{bases.get(name, 'an unknown class')}`)"
                 for name, _ in classes.most_common()]
    kind = "class" if len(described) == 1 else "classes"
    return (f"{len(own)} test(s) ran on the project's own loop {kind} "
            f"{', '.join(described)}: a loop swap does not reach them; they were not "
            "compared")


def _own_loop_advice(own: dict[str, list[str]], overrides: dict[str, list[str]]) -> str:
    """What to do about tests on the project's own loop class: make its base
    configurable, unless it overrides its stock base's internals, which no
    other loop has."""
    classes = sorted({t for loops in own.values() for t in loops})
    tied = {name: overrides[name] for name in classes if overrides.get(name)}
    if not tied:
        return ("To check those tests on zloop, make the loop class's base configurable "
                "(e.g. zloop.Loop when an environment variable says so) and run them on "
                "each base")
    said = "; ".join(f"`{name}` overrides its stock base's private "
                     f"{', '.join(f'`{m}`' for m in methods)}"
                     for name, methods in tied.items())
    return (f"{said}: a class built on stock asyncio's internals cannot take zloop.Loop "
            "as its base, so those tests run on stock asyncio only, with or without zloop")


def _no_loop_reason(baseline: dict[str, Any]) -> str:
    """Why a suite in which the swap reached no test has nothing to compare."""
    tests = baseline["tests"]
    chosen = _chosen_loop_tests(baseline)
    ran_none = sum(1 for entry in tests.values() if not entry["loops"])
    said = f"none of the {len(tests)} tests ran a loop that asyncio.new_event_loop() built"
    if chosen:
        said += (f": {len(chosen)} ran only loops they chose themselves (e.g. {chosen[0]}), "
                 f"the same in every run, and {ran_none} ran no event loop")
    else:
        said += (" (the suite's tests run no asyncio event loop: they are synchronous, or "
                 "drive their coroutines by hand)")
    unrun = sorted(test for test, entry in tests.items()
                   if "not natively supported" in entry.get("message", ""))
    if unrun:
        said += (f"; {len(unrun)} test(s) are async functions that no plugin ran (pytest: "
                 "\"async def functions are not natively supported\", e.g. "
                 f"{unrun[0]}): install the plugin they are written for (pytest-asyncio, "
                 "AnyIO's) where the check runs")
    return said


def _print_outcome(suite: Suite, baseline: dict[str, Any], base_verdict: Verdict,
                   checked: list[Checked], args: argparse.Namespace, out_dir: Path) -> int:
    problems = list(base_verdict.problems)
    rows = [base_verdict.row]
    coverages = []
    internal = 0
    for loop, backend, verdict, result in checked:
        if verdict.row["status"] == "stale list":
            verdict.row["status"] = "ok"  # a fixed difference is no failure here
        coverage = how_much_compared(baseline, result, loop)
        coverages.append((run_label(loop, backend), coverage))
        verdict.row["compared"] = coverage.compared
        if coverage.too_little and verdict.row["status"] == "ok":
            verdict.row["status"] = "too little compared"
        rows.append(verdict.row)
        label = run_label(loop, backend)
        problems += [f"{label}: {p}" for p in verdict.problems]
        assert verdict.diff is not None
        print(f"\ncompat: {label} against stock asyncio")
        details = _details(verdict.diff, baseline, result)
        internal += _on_internals(details)
        report.print_diff(verdict.diff, loop, details=details)
        for d in verdict.diff.listed:
            print(f"  LISTED    {d.test}: asyncio {d.baseline}, {loop} {d.target} "
                  f"({d.entry.reason if d.entry else ''})")
        if verdict.diff.unlisted:
            problems.append(f"{label}: {len(verdict.diff.unlisted)} test(s) differ from "
                            "stock asyncio and are not listed in "
                            f"{args.expected or 'an --expected file'}")
        problems += _new_collect_errors(baseline, result, label)
    print(f"\ncompat: {suite.name} ({suite.directory}), Python "
          "{}.{}.{}".format(*sys.version_info[:3]))
    report.print_table(rows, report.CHECK_COLUMNS)
    print("  on_loop: tests that ran on the run's loop through the swap "
          "(asyncio.new_event_loop()); other_loop: only loops they chose themselves (their "
          "own class, one built from a class, a factory they name), the same in every "
          "run; no_loop: no event loop; compared: reached by the swap and run on a loop "
          "(not errored or skipped on both); not_counted: differing outcomes in tests the "
          "swap did not reach, which cannot come from the loop")
    if args.results:
        print(f"compat: reports and pytest's output in {out_dir}")
    own = _own_loop_tests(baseline)
    note = _own_loop_note(own, baseline.get("loop_bases", {})) if own else None
    if baseline["summary"]["on_loop"] == 0 and baseline["summary"]["collected"] \
            and not problems:
        if note:
            print(f"compat: NOT COMPARED: {note}.")
            print("compat: nothing to compare, so no verdict. "
                  f"{_own_loop_advice(own, baseline.get('loop_overrides', {}))}; the "
                  "suite's other tests, if any, are compared by this check "
                  "(docs/validate.md in zloop's repository: \"A suite with its own loop class\")")
        else:
            print(f"compat: NOT COMPARED: {_no_loop_reason(baseline)}.")
            print("compat: nothing to compare, so no verdict (check --help: \"exit status\")")
        return EXIT_NOT_REACHED
    if note:
        print(f"compat: NOTE: {note}")
    for said in _child_notes(baseline, checked):
        print(f"compat: NOTE: {said}")
    chosen = _chosen_loop_tests(baseline)
    if chosen:
        print(f"compat: NOTE: {len(chosen)} test(s) ran only loops they chose themselves "
              "(built from a class, or by a factory they name), the same in every run: "
              f"counted as other_loop, not compared (e.g. {chosen[0]})")
    for label, coverage in coverages:
        print(f"compat: {label}: compared {coverage.compared} of {coverage.total} tests; "
              f"{coverage.not_run} errored or were skipped on both loops, "
              f"{coverage.no_loop} ran no event loop, {coverage.chosen} only loops they "
              "chose themselves")
    for problem in problems:
        print(f"compat: FAIL: {problem}")
    if problems:
        if internal:
            print(f"compat: {internal} of the differences come from a reliance on stock "
                  "asyncio's internals (its private attributes, its own classes), which no "
                  "other loop has, uvloop included: the project depends on asyncio "
                  "internals there, in its code or in its tests. Where only a test does, "
                  "the code may run unchanged on zloop: accept the test with --expected, "
                  "giving what it depends on as the reason; where the code does, it needs "
                  "that internal changed to run on another loop")
        unlisted = sum(len(v.diff.unlisted) for _, _, v, _ in checked if v.diff is not None)
        if unlisted > internal:
            print(f"compat: {'any other' if internal else 'a'} difference is a zloop bug to "
                  "report, with the test and the lines above, unless the test depends on "
                  "stock asyncio's own classes or internals in a way not shown there")
        if unlisted:
            print("compat: list the differences you accept, each with its reason, in a TOML "
                  "file passed as --expected (check --help: \"Differences\")")
        return 1
    little = [(label, c) for label, c in coverages if c.too_little]
    if little:
        for label, c in little:
            print(f"compat: TOO LITTLE COMPARED: {label}: {_too_little_reason(c)}")
        print("compat: no difference in what was compared, but that is too little of the "
              "suite for a verdict: make the suite run under plain pytest first "
              "(check --help: \"exit status\")")
        return EXIT_TOO_LITTLE
    print("compat: OK: every run ran on its loop, and no test differs from stock asyncio "
          "beyond the listed ones")
    return 0


def _new_collect_errors(baseline: dict[str, Any], result: dict[str, Any],
                        label: str) -> list[str]:
    """A module pytest could collect on stock asyncio and not on the loop
    under test: a difference, said with pytest's error line."""
    before = {e["nodeid"] for e in baseline.get("collect_errors") or []}
    return [f"{label}: pytest could not collect {e['nodeid'] or 'the session'} on this loop, "
            f"as it could on stock asyncio: {_quote_error(e['lines'])}"
            for e in result.get("collect_errors") or [] if e["nodeid"] not in before]


def _child_notes(baseline: dict[str, Any], checked: list[Checked]) -> list[str]:
    """How many tests ran loops in the processes they started, and the
    children that could not take the swap."""
    notes = []
    in_children = [t for t, e in baseline["tests"].items() if e.get("child_loops")]
    if in_children:
        notes.append(f"{len(in_children)} test(s) ran loops in child processes they started "
                     f"(e.g. {in_children[0]}): counted for the test that started them")
    for loop, backend, _, result in [("asyncio", None, None, baseline), *checked]:
        failed = sorted({(t, err) for t, e in result["tests"].items()
                         for err in e.get("child_errors", [])})
        if failed:
            test, error = failed[0]
            notes.append(f"{run_label(loop, backend)}: {len(failed)} child process(es) could "
                         f"not take the swap: they ran stock asyncio, unrecorded (e.g. in {test}: "
                         f"{error})")
    errors = baseline.get("collect_errors") or []
    if errors:
        notes.append(f"pytest could not collect {len(errors)} module(s) on stock asyncio "
                     f"either, whose tests were not compared (e.g. {errors[0]['nodeid']}: "
                     f"{_quote_error(errors[0]['lines'])})")
    return notes


def _too_little_reason(c: Coverage) -> str:
    said = []
    if c.not_run > c.total * MAX_NOT_RUN_SHARE:
        said.append(f"{c.not_run} of the {c.total} tests errored or were skipped on both "
                    "loops (more than half)")
    if c.compared < c.total * MIN_COMPARED_SHARE:
        said.append(f"only {c.compared} of the {c.total} were compared (fewer than a tenth)")
    if c.commonest_error:
        said.append(f"the commonest error, on stock asyncio too: {c.commonest_error}")
    return "; ".join(said)


def _details(diff: report.DiffResult, baseline: dict[str, Any],
             result: dict[str, Any]) -> dict[str, list[str]]:
    """The first lines of each unlisted difference's failure, from the run
    in which it failed (the loop under test's, else asyncio's), and what
    they show the project depends on in stock asyncio's internals."""
    details = {}
    for d in diff.unlisted:
        for side, run in (("", result), ("on asyncio: ", baseline)):
            entry = run["tests"].get(d.test) or {}
            lines = entry.get("detail") or ([entry["message"]] if entry.get("message") else [])
            if report.outcome_class(entry.get("outcome")) == "failed" and lines:
                details[d.test] = [side + lines[0], *lines[1:]]
                internal = depends_on_internals([entry.get("message", ""), *lines])
                if internal and not side:
                    details[d.test].append(f"-> depends on stock asyncio's internals: it "
                                           f"{internal}")
                break
    return details


def _on_internals(details: dict[str, list[str]]) -> int:
    return sum(1 for lines in details.values()
               if lines and lines[-1].startswith("-> depends on stock asyncio's internals"))
