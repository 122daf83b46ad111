"""Loops that run in the processes a test starts, counted for that test.

A test may run its event loop in a child process: a ``multiprocessing``
child (fork, spawn or forkserver), a ``subprocess`` running Python, or a
whole pytest (pytester's ``runpytest_subprocess``). ``zloop.testing``
reaches them as follows:

- a **forked** child inherits the swap and the loop recorder with the rest
  of the process; the recorder sees that it runs in another process than
  the one that runs the tests, and sends what it records here;
- a **new interpreter** (spawn, forkserver, ``subprocess``) inherits the
  environment: ``$ZLOOP_TESTING_CHILDREN`` (the loop, the backend and the
  records directory), ``$ZLOOP_TESTING_TEST`` (the test that is running)
  and a ``PYTHONPATH`` whose first directory holds the start-up hook
  (``zloop.compat.startup``, as ``sitecustomize.py``). Once such a child
  imports asyncio, the hook calls ``start()``, which installs the same
  swap and recorder there.

Each child appends one JSON line per new loop type to
``RECORDS/<test hash>/<pid>.jsonl``; the plugin reads a test's directory
when the test ends (and every directory when the run ends, for children
that outlived their test) and counts those loops for the test, as if they
had run in the test's own process. Standard library and zloop only: no
pytest here, a child may not have it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from zloop.compat import startup
from zloop.compat.swap import RECORDER, install_loop

CONFIG_ENV = startup.CONFIG_ENV
TEST_ENV = startup.TEST_ENV


class Channel:
    """The records directory that children write to and the plugin reads."""

    def __init__(self, records: Path) -> None:
        self.records = records

    def write(self, record: dict[str, Any]) -> None:
        """Appends a record for the running test, if one runs (see
        ``startup.write_record``)."""
        startup.write_record(str(self.records), record)

    def read(self, test: str) -> list[dict[str, Any]]:
        """The records of a test's children so far."""
        return _read_dir(Path(startup.record_dir(str(self.records), test)))

    def read_all(self) -> list[dict[str, Any]]:
        """Every record, of every test."""
        try:
            directories = sorted(self.records.iterdir())
        except OSError:
            return []
        return [r for d in directories for r in _read_dir(d)]


def _read_dir(directory: Path) -> list[dict[str, Any]]:
    records = []
    try:
        paths = sorted(directory.glob("*.jsonl"))
    except OSError:
        return []
    for path in paths:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                records.append(json.loads(line))
            except ValueError:
                pass  # a line a child is still writing
    return records


def merge(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What a test's children recorded, summed up: the loop types that ran
    in them, whether the swap built one of them, the stock bases (and
    overrides) of loop types of no known family, the processes, and the
    errors of children that could not take the swap."""
    loops = sorted({r["loop"] for r in records if r.get("loop")})
    return {
        "loops": loops,
        "reached": any(r.get("reached") for r in records),
        "bases": {r["loop"]: r["base"] for r in records if r.get("base")},
        "overrides": {r["loop"]: r.get("overrides") or [] for r in records if r.get("base")},
        "pids": sorted({r["pid"] for r in records if "pid" in r}),
        "errors": sorted({r["error"] for r in records if r.get("error")}),
    }


# --- in the process that runs the tests ------------------------------------------


class Parent:
    """The plugin's side: the records directory and the start-up hook, and
    the environment that carries them to the children."""

    def __init__(self, root: Path, loop: str, backend: str | None, spawned: bool,
                 owned: bool) -> None:
        self.root = root
        self.channel = Channel(root / "records")
        self.startup_dir = root / "startup"
        self._owned = owned  # whether this object made root, and removes it
        self._saved: dict[str, str | None] = {}
        self.config = {"loop": loop, "backend": backend,
                       "records": str(self.channel.records)}
        self.spawned = spawned

    @classmethod
    def create(cls, loop: str, backend: str | None, spawned: bool,
               root: Path | None = None) -> Parent:
        """A new records directory (``root``, or a temporary one)."""
        owned = root is None
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="zloop-testing-"))
        else:
            shutil.rmtree(root, ignore_errors=True)
        parent = cls(root, loop, backend, spawned, owned)
        parent.channel.records.mkdir(parents=True, exist_ok=True)
        if spawned:
            parent.startup_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(startup.__file__, parent.startup_dir / "sitecustomize.py")
        return parent

    @classmethod
    def inherited(cls) -> Parent | None:
        """The records directory of the run this process is a worker of
        (an xdist worker), from its environment."""
        try:
            config = json.loads(os.environ[CONFIG_ENV])
            records = Path(config["records"])
        except (KeyError, ValueError, TypeError):
            return None
        parent = cls(records.parent, config.get("loop", "asyncio"), config.get("backend"),
                     spawned=False, owned=False)
        return parent

    def export(self) -> None:
        """Puts the configuration, and the hook's directory first on
        ``PYTHONPATH``, in this process's environment, for the children."""
        self._save(CONFIG_ENV, json.dumps(self.config))
        if self.spawned:
            paths = [str(self.startup_dir), *filter(None, os.environ.get(
                "PYTHONPATH", "").split(os.pathsep))]
            self._save("PYTHONPATH", os.pathsep.join(paths))

    def _save(self, name: str, value: str) -> None:
        self._saved.setdefault(name, os.environ.get(name))
        os.environ[name] = value

    def close(self, remove: bool) -> None:
        """Restores the environment; removes the directory it made (or, with
        ``remove``, the one it was given)."""
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved.clear()
        if self._owned or remove:
            shutil.rmtree(self.root, ignore_errors=True)


def own(channel: Channel) -> None:
    """The process that runs the tests: it keeps its own loops, and its
    forked children send theirs to ``channel``."""
    RECORDER.own()
    _sink_to(channel)
    startup.after_import("multiprocessing.spawn", startup.wrap_spawn)


def _sink_to(channel: Channel) -> None:
    def sink(loop: str, reached: bool, base: str | None,
             overrides: list[str] | None) -> None:
        key = (os.environ.get(TEST_ENV), loop, reached)
        if key in sent:
            return
        sent.add(key)
        record: dict[str, Any] = {"loop": loop, "reached": reached}
        if base is not None:
            record.update(base=base, overrides=overrides or [])
        channel.write(record)

    def forked() -> None:
        # A fork runs on: its pid, and the test that made it, name it if it
        # is still running when pytest should exit.
        sent.clear()
        channel.write({"started": "fork"})

    sent: set[tuple[str | None, str, bool]] = set()
    RECORDER.child_sink = sink
    RECORDER.on_fork = forked


# --- in a child interpreter ----------------------------------------------------------


def start() -> None:
    """Installs the swap and the recorder in a child interpreter, once it
    has imported asyncio (see ``zloop.compat.startup``). Never raises: a
    child that cannot take the swap says why in its records, and runs on."""
    try:
        config = json.loads(os.environ[CONFIG_ENV])
        channel = Channel(Path(config["records"]))
    except (KeyError, ValueError, TypeError):
        return
    channel.write({"started": "interpreter"})
    try:
        RECORDER.install()
        _sink_to(channel)
        # The backend comes in $ZLOOP_BACKEND, which the parent set and
        # checked: zloop may not be importable enough yet to check it here.
        install_loop(config.get("loop") or "asyncio")
    except Exception as exc:  # noqa: BLE001 - the child runs on, unswapped
        channel.write({"error": f"{type(exc).__name__}: {exc}"[:300],
                       "python": sys.executable})
