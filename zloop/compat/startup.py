"""The start-up hook that carries ``zloop.testing``'s loop swap into the
Python processes a test starts.

``zloop.testing`` copies this file, as ``sitecustomize.py``, into a
directory of its own and puts that directory first on ``PYTHONPATH`` for
the processes the tests start; Python's ``site`` module imports
``sitecustomize`` at start-up, in every interpreter that reads
``PYTHONPATH`` and runs ``site`` (not under ``-E``, ``-I`` or ``-S``). The
hook then:

- waits for ``asyncio`` to be imported, and only then imports
  ``zloop.compat.children``, which installs the same swap and loop recorder
  as the plugin (a child that never imports asyncio pays nothing, and sees
  no asyncio in ``sys.modules`` that it did not import itself);
- carries the test's name through ``multiprocessing``'s preparation data,
  so that a child forked from a forkserver started in an earlier test
  counts for the test that asked for it;
- runs the ``sitecustomize`` it shadows, if there is one further along
  ``sys.path``.

Standard library only, and nothing at all unless
``$ZLOOP_TESTING_CHILDREN`` is set: it must be safe in any interpreter.
"""

import os
import sys

CONFIG_ENV = "ZLOOP_TESTING_CHILDREN"  # JSON: the loop, backend, records directory
TEST_ENV = "ZLOOP_TESTING_TEST"  # the test that is running, set per test
_PREPARATION_KEY = "zloop_testing_test"


class _ThenLoader:
    """A module's own loader, which runs callbacks once the module has been
    executed, then steps aside (the module keeps its own loader)."""

    def __init__(self, loader, callbacks):
        self._loader = loader
        self._callbacks = callbacks

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        try:
            self._loader.exec_module(module)
        finally:
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader
        for callback in self._callbacks:
            callback(module)


class _AfterImport:
    """A meta path finder that finds nothing itself: it wraps the loader of
    the modules it waits for, so that their callbacks run once they are
    imported, and leaves ``sys.meta_path`` when it waits for none."""

    def __init__(self):
        self.waiting = {}

    def find_spec(self, name, path=None, target=None):
        callbacks = self.waiting.pop(name, None)
        if callbacks is None:
            return None
        if not self.waiting and self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenLoader(spec.loader, callbacks)
        return spec


_WATCHER = _AfterImport()


def after_import(name, callback):
    """Call ``callback(module)`` once the module ``name`` is imported: now,
    if it already is."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    _WATCHER.waiting.setdefault(name, []).append(callback)
    if _WATCHER not in sys.meta_path:
        sys.meta_path.insert(0, _WATCHER)


def wrap_spawn(spawn):
    """Carry the running test's name from the process that starts a
    ``multiprocessing`` child (spawn or forkserver) to the child, in the
    preparation data it sends (whose keys ``prepare`` does not know it
    leaves alone). A spawned child inherits the name in its environment
    too; a forkserver's child is forked from a server that may have been
    started by an earlier test, and learns it only this way."""
    if getattr(spawn.prepare, "_zloop_testing", False):
        return
    get_data, prepare = spawn.get_preparation_data, spawn.prepare

    def get_preparation_data(name):
        data = get_data(name)
        data[_PREPARATION_KEY] = os.environ.get(TEST_ENV)
        return data

    def prepare_child(data):
        if _PREPARATION_KEY in data:
            test = data[_PREPARATION_KEY]
            if test:
                os.environ[TEST_ENV] = test
            else:
                os.environ.pop(TEST_ENV, None)
        prepare(data)

    get_preparation_data._zloop_testing = True
    prepare_child._zloop_testing = True
    spawn.get_preparation_data = get_preparation_data
    spawn.prepare = prepare_child


def record_dir(records, test):
    """The directory of a test's records under the records directory."""
    import hashlib

    digest = hashlib.sha1(test.encode("utf-8", "replace")).hexdigest()[:20]
    return os.path.join(records, digest)


def write_record(records, record):
    """Appends a record for the running test (``$ZLOOP_TESTING_TEST``), if
    one runs, to this process's file in the test's directory. Never fails:
    a child may outlive the run that made the directory."""
    test = os.environ.get(TEST_ENV)
    if not test:
        return
    import json

    line = json.dumps({"test": test, "pid": os.getpid(), **record}) + "\n"
    directory = record_dir(records, test)
    try:
        os.makedirs(directory, exist_ok=True)
        # One write of one line, appended: lines that processes write at the
        # same time do not interleave.
        fd = os.open(os.path.join(directory, f"{os.getpid()}.jsonl"),
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)
    except OSError:
        pass


def _start_children(_asyncio):
    # zloop (and the loop under test) are imported only now, after asyncio.
    try:
        from zloop.compat import children
    except Exception as exc:  # noqa: BLE001 - an interpreter zloop is not built for
        try:
            import json

            records = json.loads(os.environ[CONFIG_ENV])["records"]
        except (KeyError, ValueError, TypeError):
            return
        write_record(records, {"error": f"zloop is not importable by {sys.executable}: "
                                        f"{type(exc).__name__}: {exc}"[:300]})
        return
    children.start()


def _chain():
    """Run the ``sitecustomize`` module this one shadows, as ``site`` would
    have: its errors are printed, not raised."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        from importlib.machinery import PathFinder
        from importlib.util import module_from_spec

        spec = PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        spec.loader.exec_module(module_from_spec(spec))
    except Exception as exc:  # noqa: BLE001 - as site.execsitecustomize
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
              f"{type(exc).__name__}: {exc}", file=sys.stderr)


if __name__ == "sitecustomize":
    if os.environ.get(CONFIG_ENV):
        after_import("multiprocessing.spawn", wrap_spawn)
        after_import("asyncio", _start_children)
    _chain()
