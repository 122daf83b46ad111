"""Hides ``select.epoll`` from an interpreter, as macOS and FreeBSD have
none: put this directory on PYTHONPATH. ``selectors`` then offers no
``EpollSelector`` and picks ``PollSelector`` as its default, so
test_asyncio defines no ``EPollEventLoopTests`` and the compat injection
(``compat_asyncio_tests.py``) builds its twins from the class a machine
without epoll has. The kqueue lane of ``scripts/test`` runs CPython's
test_asyncio so, on the portable build's emulated kqueue."""

import select

for _name in [n for n in vars(select) if n == "epoll" or n.startswith("EPOLL")]:
    delattr(select, _name)
