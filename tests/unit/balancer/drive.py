"""Drive a balancer's delegate() generator the way a pool does, for tests."""

from __future__ import annotations

import types
import uuid
from collections.abc import Callable


class Context:
    """A minimal pool view: live read-only ``workers``; optionally ``ascending_uids`` and ``known_full``."""

    def __init__(self, uids, *, ordered_hint: bool, known_full=None):
        self._workers = {uid: (f"meta-{uid}", f"conn-{uid}") for uid in uids}
        if known_full is not None:
            self.known_full = frozenset(known_full)
        self.workers = types.MappingProxyType(self._workers)
        self._ordered_hint = ordered_hint

    @property
    def ascending_uids(self):
        if not self._ordered_hint:
            raise AttributeError("ascending_uids")
        return tuple(sorted(self._workers, key=lambda u: u.int))

    def remove(self, uid):
        self._workers.pop(uid, None)


class Transient(Exception):
    pass


class Hard(Exception):
    pass


async def drive(balancer, context: Context, decide: Callable[[uuid.UUID, int], str]) -> list[tuple[uuid.UUID, str]]:
    """Run one dispatch; ``decide(uid, i)`` says what the i-th candidate does.

    Outcomes: "ok" (accepts), "busy" (transient), "broken" (hard: evicted
    before the report), "gone" (left the pool before it could be tried),
    or "leave:<index>" (another worker leaves mid-rotation, then busy).
    Returns the (uid, outcome) log — with (uid, "left") entries for workers
    that left mid-rotation — and asserts the generator's protocol.
    """
    log = []
    gen = balancer.delegate(object(), context=context)
    try:
        uid = await anext(gen)
        i = 0
        while True:
            outcome = decide(uid, i)
            i += 1
            log.append((uid, outcome))
            if outcome == "ok":
                try:
                    await gen.asend(uid)
                except StopAsyncIteration:
                    return log
                raise AssertionError("balancer yielded after a success")
            if outcome == "gone":
                context.remove(uid)
                uid = await gen.asend(None)
            elif outcome == "broken":
                context.remove(uid)
                uid = await gen.athrow(Hard())
            elif outcome.startswith("leave:"):
                others = sorted(context.workers, key=lambda u: u.int)
                gone = others[int(outcome.split(":")[1]) % len(others)]
                context.remove(gone)
                log.append((gone, "left"))
                uid = await gen.athrow(Transient())
            else:
                uid = await gen.athrow(Transient())
    except StopAsyncIteration:
        return log
    finally:
        await gen.aclose()
