"""asyncio's event loop policies, reached without its deprecation warnings.

3.14 deprecates the policy API for removal in 3.16: ``asyncio.DefaultEventLoopPolicy``
and ``asyncio.set_event_loop_policy`` warn, while asyncio itself uses private
twins (``unix_events._DefaultEventLoopPolicy``, ``events._set_event_loop_policy``)
that do not. zloop uses the twins where they exist, so that importing and
using it raises no warning, and asks for nothing when policies are gone.
"""

import asyncio
import sys
from asyncio import events


def default_policy_class():
    """The class of asyncio's default policy, or None where there is none."""
    if sys.version_info < (3, 14):
        return asyncio.DefaultEventLoopPolicy
    # zloop runs on Unix only, whose default policy lives in unix_events.
    from asyncio import unix_events

    return getattr(unix_events, "_DefaultEventLoopPolicy", None)


def set_policy(policy):
    """``asyncio.set_event_loop_policy(policy)`` (None: the default one)."""
    setter = getattr(events, "_set_event_loop_policy", None)
    if setter is None:  # 3.11-3.13: the public name is the only one
        setter = asyncio.set_event_loop_policy
    setter(policy)

