"""The event loops that the benchmarks compare, and how each one is loaded.

Standard library only: this module is imported both by the orchestrator
(bench/run.py, any Python) and by the per-loop child processes (the Python
under test, usually the private .venv-bench interpreter).
"""

import asyncio
import importlib
import os

# name -> (module, factory attribute, uvicorn --loop value, environment).
# Every factory is a zero-argument callable that returns a fresh, unstarted
# event loop; the environment is set before it runs (and for the uvicorn
# server process).
LOOPS = {
    # The stock selector loop, named explicitly so that an installed policy
    # (ours, in the echo launcher) can never redirect it.
    "asyncio": ("asyncio", "SelectorEventLoop", "asyncio", {}),
    "uvloop": ("uvloop", "new_event_loop", "uvloop", {}),
    "rloop": ("rloop", "new_event_loop", "rloop:new_event_loop", {}),
    # zloop's two Linux backends, each named explicitly so that a
    # ZLOOP_BACKEND left in the caller's environment cannot swap them.
    "zloop": ("zloop", "new_event_loop", "zloop:new_event_loop", {"ZLOOP_BACKEND": "epoll"}),
    "zloop-uring": ("zloop", "new_event_loop", "zloop:new_event_loop",
                    {"ZLOOP_BACKEND": "io_uring"}),
}

# Exit status a child uses to say "this loop is not installed", so that the
# orchestrator can report the loop as missing instead of failed.
EXIT_MISSING = 3


class LoopMissing(Exception):
    """The loop's module cannot be imported or lacks its factory."""


def parse_names(text):
    """Split a comma-separated --loops value, rejecting unknown names."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in LOOPS]
    if unknown:
        raise ValueError(
            "unknown loop(s) %s; choose from %s" % (", ".join(unknown), ", ".join(LOOPS))
        )
    return names


def environment(name):
    """The environment variables `name`'s loop is made under."""
    return dict(LOOPS[name][3])


def backend(name):
    """The zloop backend `name` must run on, or None."""
    return LOOPS[name][3].get("ZLOOP_BACKEND")


def describe_loop(loop):
    """'module.Class' of a loop, with ' backend=NAME' for a zloop: what the
    echo launcher and the HTTP app report, and what the drivers check."""
    cls = type(loop)
    text = "%s.%s" % (cls.__module__, cls.__qualname__)
    if hasattr(loop, "_backend"):
        text += " backend=%s" % loop._backend
    return text


def factory(name):
    """Return the loop factory for `name`, or raise LoopMissing saying why.

    A loop with an environment gets a factory that sets it first, and that
    refuses a zloop whose backend is not the one asked for (io_uring falls
    back to epoll quietly where the kernel refuses it).
    """
    module_name, attr, _, env = LOOPS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LoopMissing("%s: %s: %s" % (name, type(exc).__name__, exc)) from exc
    try:
        make = getattr(module, attr)
    except AttributeError as exc:
        raise LoopMissing("%s: %s has no attribute %s" % (name, module_name, attr)) from exc
    if not env:
        return make
    want = backend(name)

    def make_in_env():
        os.environ.update(env)
        loop = make()
        got = getattr(loop, "_backend", None)
        if want is not None and got != want:
            loop.close()
            raise RuntimeError("%s: asked for backend %s, the loop runs %s" % (name, want, got))
        return loop

    make_in_env.__qualname__ = "%s[%s]" % (getattr(make, "__qualname__", attr),
                                           ",".join("%s=%s" % kv for kv in sorted(env.items())))
    make_in_env.__module__ = getattr(make, "__module__", module_name)
    return make_in_env


def version(name):
    """The installed version of the loop's distribution, or the Python version."""
    module_name = LOOPS[name][0]
    if module_name == "asyncio":
        import sys

        return "python " + sys.version.split()[0]
    try:
        from importlib import metadata

        return metadata.version(module_name)
    except Exception:  # a source checkout on sys.path has no metadata
        module = importlib.import_module(module_name)
        return getattr(module, "__version__", "unknown")


def install_policy(name, on_new_loop=None):
    """Make asyncio.new_event_loop() (and so asyncio.run) build `name`'s loop.

    Public API only: a default-policy subclass whose new_event_loop() calls the
    factory.  The script that runs afterwards is not modified in any way.
    """
    make_loop = factory(name)

    class BenchPolicy(asyncio.DefaultEventLoopPolicy):
        def new_event_loop(self):
            loop = make_loop()
            if on_new_loop is not None:
                on_new_loop(loop)
            return loop

    asyncio.set_event_loop_policy(BenchPolicy())
    return make_loop


def run_child(name, run):
    """A per-loop child's main: makes a loop of `name`, prints `run(loop)`'s
    result as one JSON object, closes the loop; the exit status, EXIT_MISSING
    (saying why on stderr) when the loop is not installed."""
    import json
    import sys

    try:
        make = factory(name)
    except LoopMissing as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_MISSING
    loop = make()
    try:
        result = run(loop)
    finally:
        loop.close()
    print(json.dumps(result))
    return 0

