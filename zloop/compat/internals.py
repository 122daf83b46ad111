"""Differences that come from a test's reliance on stock asyncio's internals.

A test that passes on stock asyncio and fails on another loop because it
reads or writes a private attribute of asyncio's objects (a transport's
``_address``, a loop's ``_selector``), or asserts that an object is an
instance of asyncio's own class (``isinstance(handle, asyncio.Handle)``),
shows no bug of the other loop: every asyncio-compatible loop (uvloop
too) implements the public API with classes and attributes of its own.
The project's own code may well run unchanged on that loop. ``check`` says
so under such a difference, from its failure lines, so that the user can
tell it from a bug and accept it (``--expected``) with the reason.
"""

from __future__ import annotations

import asyncio
import re

# (pattern over a failure's lines, what the test depends on), the first
# match wins. Only private names (one leading underscore) count: a public
# attribute that is missing is the loop's to have.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?:attribute|property) '(?P<attr>_[A-Za-z]\w*)' of '(?P<type>[\w.]+)' "
                r"objects? (?:is not writable|has no setter)"),
     "writes `{attr}`, a private attribute of stock asyncio's object, which `{type}` "
     "does not let it set"),
    (re.compile(r"'(?P<type>[\w.]+)' object attribute '(?P<attr>_[A-Za-z]\w*)' is read-only"),
     "writes `{attr}`, a private attribute of stock asyncio's object, which `{type}` "
     "does not let it set"),
    (re.compile(r"'(?P<type>[\w.]+)' object has no attribute '(?P<attr>_[A-Za-z]\w*)'"),
     "uses `{attr}`, a private attribute of stock asyncio's object, which `{type}` "
     "does not have"),
    (re.compile(r"<(?P<type>[\w.]+) (?:object )?.*> does not have the attribute "
                r"'(?P<attr>_[A-Za-z]\w*)'"),
     "patches `{attr}`, a private attribute of stock asyncio's object, which `{type}` "
     "does not have"),
    (re.compile(r"isinstance\(.*, <class '(?P<cls>asyncio\.[\w.]+)'>\)"),
     "asserts that an object is an instance of stock asyncio's own class `{cls}`"),
    (re.compile(r"is not an instance of <class '(?P<cls>asyncio\.[\w.]+)'>"),
     "asserts that an object is an instance of stock asyncio's own class `{cls}`"),
)


def depends_on_internals(lines: list[str]) -> str | None:
    """What a failure's lines (its message, pytest's ``E`` lines) say the
    test depends on in stock asyncio's internals, or None."""
    text = "\n".join(lines)
    for pattern, said in _PATTERNS:
        match = pattern.search(text)
        if match:
            found = match.groupdict()
            if "cls" in found:
                found["cls"] = _public_name(found["cls"])
            return said.format(**found)
    return None


def _public_name(qualified: str) -> str:
    """``asyncio.TimerHandle`` for ``asyncio.events.TimerHandle``: the name
    asyncio exports a class under, where it does."""
    name = qualified.rsplit(".", 1)[-1]
    return f"asyncio.{name}" if hasattr(asyncio, name) else qualified
