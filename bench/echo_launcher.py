"""Run an unmodified script (uvloop's echoserver.py) on a chosen event loop.

    python bench/echo_launcher.py LOOP SCRIPT [SCRIPT ARGS...]

Installs an event-loop policy whose new_event_loop() builds LOOP's loop (see
loops.install_policy), then runs SCRIPT as __main__ with runpy.  Nothing in
the script is patched: echoserver.py calls asyncio.new_event_loop() itself,
and that call now returns LOOP's loop.  Exit status 3 means LOOP is not
installed.
"""

import os
import runpy
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loops  # noqa: E402

# Keep the script's view of sys.path as if it had been started directly.
del sys.path[0]


def announce(loop):
    """Say which loop the script got: the driver checks this line."""
    print("echo_launcher: loop created: %s" % loops.describe_loop(loop),
          file=sys.stderr, flush=True)


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    name, script = sys.argv[1], sys.argv[2]
    try:
        make_loop = loops.install_policy(name, on_new_loop=announce)
    except loops.LoopMissing as exc:
        print("MISSING: %s" % exc, file=sys.stderr)
        return loops.EXIT_MISSING
    sys.argv = [script] + sys.argv[3:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    print("echo_launcher: %s via %s.%s" % (name, make_loop.__module__, make_loop.__qualname__),
          file=sys.stderr, flush=True)
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
