"""What the randomised tests (``test_fuzz_*.py``) share: the seeds they run
and the stream kinds they run them on."""

import os

import pytest


def seeds():
    """The seeds to run: ``ZLOOP_FUZZ_SEEDS`` is a count (``200``: seeds
    0-199) or a range (``1000-1999``); 40 by default, kept short for CI."""
    spec = os.environ.get("ZLOOP_FUZZ_SEEDS", "40")
    if "-" in spec:
        first, last = (int(part) for part in spec.split("-"))
        return range(first, last + 1)
    return range(int(spec))


@pytest.fixture(params=["tcp", "unix"])
def kind(request):
    """The stream socket a case runs over (a module imports this to use it)."""
    return request.param
