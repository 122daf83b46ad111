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


def shaped(rng, data):
    """``(data, arg)``: ``arg`` holds ``data``'s bytes as ``bytes``, a
    ``bytearray``, or a memoryview into a larger object (a random lead
    before them), for write() to take in every shape."""
    form = rng.randrange(3)
    if form == 1:
        return data, bytearray(data)
    if form == 2 and data:
        lead = rng.randrange(4)
        return data, memoryview(bytes(lead) + data)[lead:]
    return data, data


def write_random(rng, transport, sent, chunk, *, lines):
    """One ``write()`` of ``chunk(rng)``, or (``lines``) one ``writelines()``
    of one to four; appends what was written to ``sent``."""
    parts = [chunk(rng) for _ in range(rng.randint(1, 4) if lines else 1)]
    if lines:
        transport.writelines([arg for _, arg in parts])
    else:
        transport.write(parts[0][1])
    for data, _ in parts:
        sent += data
