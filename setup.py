"""Builds zloop's extension with Zig (the `ziglang` package from PyPI).

`pip install .` and `pip install -e .` both land here: the extension is
compiled by `zig build` for the interpreter running the build, against that
interpreter's own Python.h (translated by Zig's translate-c step).

ZLOOP_OPTIMIZE picks the Zig build mode: ReleaseFast (default, what ships
and what benchmarks use), ReleaseSafe or Debug (safety-checked, for tests).
ReleaseFast and ReleaseSmall builds are release builds, as the wheels are:
no debug info in the extension (1.4 MB of it otherwise), and on Linux the
symbol table kept, so that profilers and debuggers name zloop's functions;
Debug and ReleaseSafe keep their debug info.
ZLOOP_CPU picks the target CPU (default: the build machine's own, `native`);
a baseline such as `x86_64_v3` makes a portable build, and one valgrind can
run (it cannot execute AVX-512).
ZLOOP_PORTABLE=1 makes a Linux build take the portable OS layer that macOS
and the BSDs run, and offer the backends epoll and kqueue (an emulation of
kqueue(2) on epoll, `ZLOOP_BACKEND=kqueue`): for testing that code on Linux
(tox's `-kqueue` environments), never for use or for a wheel.

A build takes minutes (the first Zig build on a machine also builds Zig's
own build runner into its global cache). It prints its stages as Zig
reaches them: `pip install -v` shows them.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

MODES = ("Debug", "ReleaseSafe", "ReleaseFast", "ReleaseSmall")
RELEASE_MODES = ("ReleaseFast", "ReleaseSmall")


class ZigBuildExt(build_ext):
    def build_extension(self, ext):
        mode = os.environ.get("ZLOOP_OPTIMIZE", "ReleaseFast")
        if mode not in MODES:
            raise SystemExit(f"ZLOOP_OPTIMIZE must be one of {MODES}, got {mode!r}")
        if importlib.util.find_spec("ziglang") is None:
            raise SystemExit("zloop builds with Zig from the ziglang package, which is not "
                             "installed here: pip install ziglang==0.17.1 (pip does it by "
                             "itself unless --no-build-isolation is given)")
        root = os.path.dirname(os.path.abspath(__file__))
        include = sysconfig.get_paths()["include"]
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with tempfile.TemporaryDirectory() as prefix:
            cmd = [
                sys.executable, "-m", "ziglang", "build",
                f"-Doptimize={mode}",
                f"-Dstrip={'true' if mode in RELEASE_MODES else 'false'}",
                f"-Dpython-include={include}",
                f"-Dcpu={os.environ.get('ZLOOP_CPU', 'native')}",
                f"-Dportable={'true' if _portable() else 'false'}",
                "--prefix", prefix,
                "--cache-dir", os.path.join(root, ".zig-cache"),
            ]
            what = f"{mode}, portable" if _portable() else mode
            _say(f"building zloop's extension ({what}) with Zig: " + " ".join(cmd[1:]))
            started = time.monotonic()
            _run_zig(cmd, root)
            shutil.copyfile(os.path.join(prefix, "lib", "_zloop.so"), target)
        size_kb = os.path.getsize(target) / 1024
        _say(f"built {os.path.basename(target)} ({size_kb:.0f} KiB) in "
             f"{_clock(time.monotonic() - started)}")


def _portable():
    return os.environ.get("ZLOOP_PORTABLE", "0") not in ("", "0")


def _say(text):
    print(f"zloop: {text}", flush=True)


def _clock(seconds):
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def _run_zig(cmd, cwd):
    """Runs `zig build`, printing a line for each stage it reaches. Zig
    draws its progress only on a terminal, so it runs on a pseudo-terminal
    whose frames are read here; where there is none, it runs plainly."""
    try:
        import pty
        master, slave = pty.openpty()
    except (ImportError, OSError):
        subprocess.run(cmd, cwd=cwd, check=True)
        return
    _set_width(slave, 200)
    env = dict(os.environ, TERM=os.environ.get("TERM") or "xterm")
    if env["TERM"] == "dumb":
        env["TERM"] = "xterm"
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave)
    os.close(slave)
    stages = _Stages(time.monotonic())
    raw = bytearray()
    with os.fdopen(master, "rb", buffering=0) as tty:
        while True:
            try:
                chunk = tty.read(65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            raw += chunk
            stages.feed(chunk)
    rc = proc.wait()
    rest = _outside_frames(bytes(raw))
    if rest.strip():
        print(rest.rstrip(), flush=True)  # errors and warnings, as zig printed them
    if rc != 0:
        raise subprocess.CalledProcessError(rc, cmd)


def _set_width(fd, columns):
    try:
        import fcntl
        import struct
        import termios

        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    except (ImportError, OSError):
        pass


# Zig's progress display, as it draws it on a terminal: each frame between
# "begin/end synchronized update" sequences, a node per line, a child's line
# indented and led by a line-drawing glyph.
_FRAME = re.compile(rb"\x1b\[\?2026h(.*?)\x1b\[\?2026l", re.DOTALL)
_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x1b\x07]*(\x1b\\|\x07)|\x1b[()][0-9A-B]|"
                     r"\x1bM|[\x0e\x0f]")
_COUNTER = re.compile(r"^\[[0-9/]+\]\s*")
# A node's line: indentation (three columns a level, a vertical bar in
# some), then the branch glyph of a child, then the name.
_NODE = re.compile(r"^((?:   |\x1b\(0x\x1b\(B  )*)(\x1b\(0[tm]q\x1b\(B )?(.*)$", re.DOTALL)


class _Stages:
    """Prints each stage of a Zig build once, when it first shows: the
    top-level steps (translate-c, compile lib _zloop) and their phases
    (Semantic Analysis, LLVM Emit Object, LLD Link), with the time so far."""

    def __init__(self, started):
        self.started = started
        self.pending = b""
        self.seen = set()

    def feed(self, chunk):
        self.pending += chunk
        end = self.pending.rfind(b"\x1b[?2026l")
        if end < 0:
            return
        for frame in _FRAME.findall(self.pending[:end + 8]):
            self._frame(frame.decode("utf-8", "replace"))
        self.pending = self.pending[end + 8:]

    def _frame(self, text):
        path = []  # the names from the root down to the current line's parent
        for line in text.split("\n"):
            node = _NODE.match(line.rstrip("\r"))
            depth = 0 if node.group(2) is None else len(node.group(1)) // 3 + 1
            name = _COUNTER.sub("", _ESCAPE.sub("", node.group(3))).strip()
            if not name:
                continue
            del path[depth:]
            path.append(name)
            # The root ("steps", or a one-time setup), its steps, their
            # phases: deeper lines, and names with a dot, are source files
            # and functions.
            level = depth - (path[0] == "steps")  # the steps are the top level
            if level > 2 or (depth and "." in name) or name == "steps":
                continue
            key = tuple(path[1:] if path[0] == "steps" else path)
            if key and key not in self.seen:
                self.seen.add(key)
                _say(f"[{_clock(time.monotonic() - self.started)}] zig: {': '.join(key)}")


def _outside_frames(raw):
    """What Zig printed outside its progress frames (errors, warnings)."""
    text = _FRAME.sub(b"", raw).decode("utf-8", "replace")
    return _ESCAPE.sub("", text).replace("\r\n", "\n").replace("\r", "")


setup(
    ext_modules=[Extension("zloop._zloop", sources=[])],
    cmdclass={"build_ext": ZigBuildExt},
)
