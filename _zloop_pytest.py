"""The pytest plugin that installing zloop registers (entry point ``zloop``):
inert, it only knows ``zloop.testing``'s options.

``zloop.testing`` swaps the event loop and wraps asyncio's
``_set_running_loop``, which it must do before the suite imports any loop
module, so it is loaded only where ``-p zloop.testing`` names it (an
always-loaded plugin would change every pytest run in the environment, and
load too late to be sure of the wrap). Without this one, a user who gives
``--zloop-loop zloop`` and forgets ``-p zloop.testing`` gets pytest's bare
"unrecognized arguments", and one who sets ``zloop_loop`` in pytest.ini
gets a warning and a run on stock asyncio. With it, both get a usage error
that says what to add; with ``-p zloop.testing`` (or ``-p no:zloop``) it
does nothing at all.

A top-level module, not part of the ``zloop`` package: pytest imports it
at every start-up where zloop is installed, and it imports nothing but
pytest, so that start-up never loads zloop's extension (nor fails where
that cannot load: a build for another Python, a checkout's unbuilt
``zloop/`` ahead of the installed one on ``sys.path``).
"""

from __future__ import annotations

import pytest

# The options a user gives: (flag, ini name, help). zloop.testing has these
# and the ones the compat runner gives it.
USER_OPTIONS = (
    ("--zloop-loop", "zloop_loop",
     "loop that asyncio.new_event_loop() builds for the whole run: asyncio|uvloop|zloop "
     "(default: $ZLOOP_TEST_LOOP, else asyncio)"),
    ("--zloop-backend", "zloop_backend",
     "zloop backend, one of zloop.BACKENDS (epoll|io_uring on Linux), passed to zloop "
     "as ZLOOP_BACKEND"),
    ("--zloop-report", "zloop_report",
     "write a JSON report: each test's outcome and the loop types it ran on"),
    ("--zloop-exclude", "zloop_exclude",
     'deselect tests named in a JSON list of {"test": glob, "reason": text}'),
    ("--zloop-label", "zloop_label",
     "free-form label stored in the report (suite name, version)"),
    ("--zloop-children", "zloop_children",
     "yes (default): the Python processes a test starts (multiprocessing's spawn and "
     "forkserver, subprocess, pytester's runpytest_subprocess) run on the same loop, and "
     "their loops count for the test, through a start-up hook on their PYTHONPATH; no: "
     "only forked children, which inherit the swap, are reached"),
)
PATH_OPTIONS = ("zloop_report", "zloop_exclude")
GROUP = "zloop"
# The names zloop.testing is registered under: its module name, or the
# top-level alias the compat runner loads it as when zloop is not built.
PLUGIN_NAMES = ("zloop.testing", "zloop_testing")


def _active(pluginmanager: pytest.PytestPluginManager) -> bool:
    return any(pluginmanager.has_plugin(name) for name in PLUGIN_NAMES)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    if _active(pluginmanager):
        return  # zloop.testing, loaded first (-p), has them
    group = parser.getgroup(GROUP, "run the suite on a chosen event loop (zloop.testing)")
    for flag, name, text in USER_OPTIONS:
        group.addoption(flag, dest=name, default=None,
                        metavar="PATH" if name in PATH_OPTIONS else None,
                        help=f"{text} (needs -p zloop.testing)")
        parser.addini(name, help=f"{text} (as {flag}; needs -p zloop.testing)", default=None)


def pytest_configure(config: pytest.Config) -> None:
    if _active(config.pluginmanager):
        return
    given = [flag for flag, name, _ in USER_OPTIONS if config.getoption(name, None) is not None]
    given += [f"the {name} ini option" for _, name, _ in USER_OPTIONS
              if config.getini(name)]
    if given:
        raise pytest.UsageError(
            f"{', '.join(given)} needs zloop's pytest plugin, which pytest loads only where "
            "-p names it (it must wrap asyncio before the suite imports any event loop): "
            "pytest -p zloop.testing --zloop-loop zloop, or addopts = -p zloop.testing in "
            "the pytest configuration")
