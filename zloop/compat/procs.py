"""The processes a pytest run started, and ending them.

Each run's pytest leads a session and a process group of its own
(``start_new_session``), and everything the tests start stays in them
unless it makes a session of its own (``setsid``,
``start_new_session=True``). Ending a run ends its whole group (and, on
Linux, its whole session): a run past a limit, and whatever a run left
behind when pytest exited (a worker a test never joined), which would
otherwise hold the output pipe open and keep the check waiting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Process:
    pid: int
    command: str  # its command line, shortened


def members(leader: int) -> list[Process]:
    """The live processes of the group (and, on Linux, the session) that
    ``leader`` started, the leader included if it still runs."""
    if sys.platform.startswith("linux"):
        return _linux_members(leader)
    return _ps_members(leader)


def _linux_members(leader: int) -> list[Process]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # "pid (comm) state ppid pgrp session ...": comm may hold spaces.
            fields = stat[stat.rindex(")") + 2:].split()
            state, pgrp, session = fields[0], int(fields[2]), int(fields[3])
            if state == "Z" or leader not in (pgrp, session):
                continue
            raw = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        argv = raw.decode("utf-8", "replace").split("\0")
        found.append(Process(int(entry.name), _short(argv)))
    return sorted(found, key=lambda p: p.pid)


def _ps_members(leader: int) -> list[Process]:
    try:
        out = subprocess.run(["ps", "-A", "-o", "pid=,pgid=,stat=,command="],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 3 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        if int(parts[1]) != leader or parts[2].startswith("Z"):
            continue
        found.append(Process(int(parts[0]), _short((parts[3] if len(parts) > 3 else "").split())))
    return sorted(found, key=lambda p: p.pid)


def _short(argv: list[str]) -> str:
    """A command line to show: the program's name without its directory
    (a virtual environment's long path says nothing)."""
    words = [w for w in argv if w]
    if words:
        words[0] = os.path.basename(words[0])
    return " ".join(words)[:160]


def end(leader: int, grace_s: float = 5.0, settle_s: float = 0.0) -> list[Process]:
    """Ends every process of the leader's group (and session): SIGTERM,
    then SIGKILL for those still there after ``grace_s``. Returns the
    processes it had to end: those still running after ``settle_s``, time
    to end by themselves (multiprocessing's resource tracker ends once
    pytest has gone, a moment after it)."""
    running = members(leader)
    settle_until = time.monotonic() + settle_s
    while running and time.monotonic() < settle_until:
        time.sleep(0.1)
        running = members(leader)
    _signal(leader, running, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        left = members(leader)
        if not left:
            return running
        time.sleep(0.1)
    _signal(leader, members(leader), signal.SIGKILL)
    return running


def _signal(leader: int, running: list[Process], sig: int) -> None:
    try:
        os.killpg(leader, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for process in running:  # the session's members outside the group
        try:
            os.kill(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie, ended and not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[0] != "Z"
    except (OSError, ValueError, IndexError):
        return True  # no /proc here: kill(0) is all there is
