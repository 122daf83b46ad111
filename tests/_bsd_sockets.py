"""Builds the test-only emulation of macOS's and FreeBSD's socket answers
(``emulation/bsd_sockets.c``, an LD_PRELOAD library over glibc's socket
calls; its header lists the rules and the kernel sources they follow).

    python tests/_bsd_sockets.py OUT.so     builds it, prints OUT.so's path

Then ``LD_PRELOAD=OUT.so ZLOOP_KQUEUE_PERSONALITY=macos`` (or ``freebsd``)
gives a process, and the children it starts, that kernel's answers; the
kqueue lane of ``scripts/test`` runs the own tests so, on the portable
build. The compiler is Zig's (``python -m ziglang cc``, from the Python
running this or the one named in ``$ZIG``'s place) or the system's ``cc``.
Linux (glibc) only: elsewhere the real kernel answers.
"""

import os
import shlex
import shutil
import subprocess
import sys

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "emulation", "bsd_sockets.c")


def compilers():
    """The C compilers to try, each an argv prefix: $ZIG's or this
    Python's Zig, then the system's cc."""
    found = []
    if os.environ.get("ZIG"):
        found.append(shlex.split(os.environ["ZIG"]) + ["cc"])
    try:
        import ziglang  # noqa: F401
    except ImportError:
        pass
    else:
        found.append([sys.executable, "-m", "ziglang", "cc"])
    for cc in ("cc", "gcc", "clang"):
        if shutil.which(cc):
            found.append([cc])
            break
    return found


def build(out):
    """Compiles the library to ``out``; returns its path. Raises
    RuntimeError (with each compiler's complaint) if none builds it."""
    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tried = []
    for cc in compilers():
        cmd = cc + ["-shared", "-fPIC", "-O2", "-Wall", "-o", out, SOURCE, "-ldl", "-lpthread"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            tried.append(f"{shlex.join(cmd)}: {exc}")
            continue
        if done.returncode == 0:
            return out
        tried.append(f"{shlex.join(cmd)}:\n{done.stderr.strip()}")
    raise RuntimeError("no C compiler built " + SOURCE + ":\n" + "\n".join(tried or ["none found"]))


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.platform.startswith("linux"):
        sys.exit(__doc__)
    print(build(sys.argv[1]))
