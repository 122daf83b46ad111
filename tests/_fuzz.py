"""What the randomised tests (``test_fuzz_*.py``) share: the seeds they run
and the check that a case leaves nothing behind."""

import gc
import os
import warnings

import pytest

from _support import open_fds


def seeds():
    """The seeds to run: ``ZLOOP_FUZZ_SEEDS`` is a count (``200``: seeds
    0-199) or a range (``1000-1999``); 40 by default, kept short for CI."""
    spec = os.environ.get("ZLOOP_FUZZ_SEEDS", "40")
    if "-" in spec:
        first, last = (int(part) for part in spec.split("-"))
        return range(first, last + 1)
    return range(int(spec))


@pytest.fixture(autouse=True)
def no_leaks():
    """No descriptor outlives the case and nothing it made warns of an
    unclosed resource (a module imports this to use it)."""
    # What earlier tests left to the collector is theirs, not this case's.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    before = open_fds()
    yield
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == []
    assert open_fds() - before == set()
