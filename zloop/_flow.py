"""Flow-control calls from a transport into a protocol, shared by the
socket transports (``_net``) and the TLS layer (``_tls``), which cannot
import each other both ways."""


def tell_protocol(loop, target, name, transport, protocol):
    """``target.<name>()`` (``pause_writing``, ``resume_writing``): a failure
    goes to the loop's exception handler with ``transport`` and ``protocol``
    as its context, as asyncio's transports report it; it never reaches the
    transport's caller."""
    try:
        getattr(target, name)()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        loop.call_exception_handler({
            "message": f"protocol.{name}() failed",
            "exception": exc,
            "transport": transport,
            "protocol": protocol,
        })
