"""The minimal ASGI app that bench/httpbench.py serves with uvicorn.

GET / answers a fixed 13-byte plain-text body: the loop, the HTTP parser and
uvicorn's protocol are what is measured, not the app.  GET /loop names the
running loop's class (and a zloop's backend), so that the driver can check
the loop really in use.
"""

import asyncio

import loops  # bench/ is uvicorn's --app-dir, so on sys.path

BODY = b"Hello, world!"
HEADERS = [(b"content-type", b"text/plain"), (b"content-length", b"13")]


async def app(scope, receive, send):
    if scope["type"] != "http":  # lifespan is turned off by the driver
        return
    body = BODY
    if scope["path"] == "/loop":
        body = loops.describe_loop(asyncio.get_running_loop()).encode()
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
    else:
        headers = HEADERS
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
