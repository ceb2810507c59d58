"""Tests for pool._dispatch._limits: gates, queues, keys, workflows, deadlocks, and a stateful model."""

from __future__ import annotations

import asyncio
import collections

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import pool
from pool._call._task import CallRecord
from pool._dispatch._limits import Gate, Limits, Ticket


def task(name="f", *, queue=None, key="", workflow="", halt_on_error=False) -> CallRecord:
    return CallRecord(
        name=name,
        generator=False,
        digest=b"",
        blob=b"",
        args=b"",
        queue=queue.name if queue else "",
        concurrency=queue.concurrency if queue else 0,
        total=(queue.total or 0) if queue else 0,
        key=key,
        workflow=workflow,
        halt_on_error=halt_on_error,
    )


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


class TestQueue:
    @pytest.mark.parametrize(
        ("kwargs", "error"),
        [
            ({"name": ""}, TypeError),
            ({"name": "q", "concurrency": 0}, ValueError),
            ({"name": "q", "concurrency": 1.5}, TypeError),
            ({"name": "q", "total": 0}, ValueError),
        ],
    )
    def test_init_should_validate(self, kwargs, error):
        """Test that a bad queue fails where it is made."""
        with pytest.raises(error):
            pool.Queue(**kwargs)


class TestGate:
    async def test_acquire_should_grant_in_fifo_order(self):
        """Test strict arrival order among waiters with the same limit."""
        gate, order = Gate(("queue", "q", "")), []

        async def take(i):
            ticket = Ticket(task(f"t{i}"), None, 0)
            await gate.acquire(ticket, 1)
            order.append(i)
            return ticket

        first = await take(0)
        waiters = [asyncio.ensure_future(take(i)) for i in range(1, 6)]
        await settle()
        holder = first
        for _ in range(5):
            gate.release(holder)
            await settle()
            holder = next(w.result() for w in waiters if w.done() and w.result() in gate.holders)
        assert order == list(range(6))

    async def test_acquire_should_let_a_higher_limit_pass_waiters_that_do_not_fit(self):
        """Test a per-call override: a call allowed 3 starts while calls allowed 2 wait."""
        gate = Gate(("queue", "q", ""))
        for _i in range(2):
            await gate.acquire(Ticket(task(), None, 0), 2)
        low = asyncio.ensure_future(gate.acquire(Ticket(task("low"), None, 0), 2))
        await settle()
        assert not low.done()
        await asyncio.wait_for(gate.acquire(Ticket(task("high"), None, 0), 3), 1)
        assert gate.running == 3 and not low.done()
        low.cancel()

    async def test_cancelled_waiter_should_leave_and_never_hold(self):
        """Test that cancellation removes the waiter and leaves the gate idle when done."""
        gate = Gate(("queue", "q", ""))
        holder = Ticket(task(), None, 0)
        await gate.acquire(holder, 1)
        waiter = asyncio.ensure_future(gate.acquire(Ticket(task(), None, 0), 1))
        await settle()
        waiter.cancel()
        await settle()
        assert gate.waiting == 0
        gate.release(holder)
        assert gate.idle()


class TestLimits:
    async def test_acquire_should_lend_the_callers_slot_when_a_child_needs_its_queue(self):
        """Test seed 001's same-queue rule: a waiting parent lends its slot to its child, once per level."""
        limits, q = Limits(), pool.Queue("db", concurrency=1)
        parent = Ticket(task("parent", queue=q), None, 0)
        await limits.acquire(parent)
        child = Ticket(task("child", queue=q), parent, 0)
        await asyncio.wait_for(limits.acquire(child), 1)  # runs in the parent's slot
        assert limits.stats()["queue 'db'"] == pool.GateStats(running=1, waiting=0)
        grandchild = Ticket(task("grandchild", queue=q), child, 0)
        with pytest.raises(pool.Deadlock, match=r"grandchild\(\) waits for queue 'db'.*its own caller chain"):
            await asyncio.wait_for(limits.acquire(grandchild), 1)
        limits.release(child)
        limits.release(parent)
        assert len(limits) == 0

    @pytest.mark.parametrize("concurrency", [1, 2, 3])
    async def test_acquire_should_allow_a_chain_as_deep_as_the_concurrency(self, concurrency):
        """Test that X slots are lent along one chain and the (X+1)-th nested level is a Deadlock."""
        limits, q = Limits(), pool.Queue("db", concurrency=concurrency)
        chain = [Ticket(task("t0", queue=q), None, 0)]
        await limits.acquire(chain[0])
        for depth in range(1, concurrency + 1):
            chain.append(Ticket(task(f"t{depth}", queue=q), chain[-1], 0))
            await asyncio.wait_for(limits.acquire(chain[-1]), 1)
        with pytest.raises(pool.Deadlock):
            await limits.acquire(Ticket(task("one-more", queue=q), chain[-1], 0))
        for ticket in reversed(chain):
            limits.release(ticket)
        assert len(limits) == 0

    async def test_acquire_should_lend_to_one_sibling_at_a_time(self):
        """Test that two children of one parent share the lent slot in turn, never both at once."""
        limits, q = Limits(), pool.Queue("db", concurrency=1)
        parent = Ticket(task("parent", queue=q), None, 0)
        await limits.acquire(parent)
        first = Ticket(task("first", queue=q), parent, 0)
        second = Ticket(task("second", queue=q), parent, 0)
        await limits.acquire(first)
        waiting = asyncio.ensure_future(limits.acquire(second))
        await settle()
        assert not waiting.done()
        limits.release(first)
        await asyncio.wait_for(waiting, 1)
        limits.release(second)
        limits.release(parent)
        assert len(limits) == 0

    async def test_acquire_should_wait_when_strangers_hold_the_slots_and_no_caller_does(self):
        """Test that a call whose callers hold no slot waits in line for a stranger's."""
        limits, q = Limits(), pool.Queue("db", concurrency=1)
        other = pool.Queue("other", concurrency=1)
        parent = Ticket(task("parent", queue=other), None, 0)
        stranger = Ticket(task("stranger", queue=q), None, 0)
        await limits.acquire(parent)
        await limits.acquire(stranger)
        child = asyncio.ensure_future(limits.acquire(Ticket(task("child", queue=q), parent, 0)))
        await settle()
        assert not child.done()
        limits.release(stranger)
        await asyncio.wait_for(child, 1)

    async def test_workflow_should_run_one_call_at_a_time_in_call_order(self):
        """Test the sequential guarantee on the gate level."""
        limits, order = Limits(), []
        tickets = [Ticket(task(f"t{i}", workflow="w"), None, 0) for i in range(5)]

        async def run(ticket):
            await limits.acquire(ticket)
            order.append(ticket.task.name)

        runners = [asyncio.ensure_future(run(t)) for t in tickets]
        for ticket in tickets:
            await settle()
            assert order[-1] == ticket.task.name and len(order) == tickets.index(ticket) + 1
            limits.release(ticket)
        await asyncio.gather(*runners)

    async def test_failure_with_halt_on_error_should_fail_the_waiting_calls_of_its_workflow(self):
        """Test that only the calls queued behind a halting failure are failed."""
        limits = Limits()
        failing = Ticket(task("step1", workflow="w", halt_on_error=True), None, 0)
        await limits.acquire(failing)
        waiting = asyncio.ensure_future(limits.acquire(Ticket(task("step2", workflow="w"), None, 0)))
        await settle()
        limits.release(failing, RuntimeError("boom"))
        with pytest.raises(pool.WorkflowHalted, match=r"step2\(\) did not run: step1\(\) failed.*RuntimeError: boom"):
            await waiting
        assert len(limits) == 0
        later = Ticket(task("step3", workflow="w"), None, 0)
        await asyncio.wait_for(limits.acquire(later), 1)  # a fresh start

    async def test_failure_without_halt_should_let_the_next_call_run(self):
        """Test that a failed call does not block its workflow unless asked."""
        limits = Limits()
        failing = Ticket(task("step1", workflow="w"), None, 0)
        await limits.acquire(failing)
        nxt = asyncio.ensure_future(limits.acquire(Ticket(task("step2", workflow="w"), None, 0)))
        await settle()
        limits.release(failing, RuntimeError("boom"))
        await asyncio.wait_for(nxt, 1)

    async def test_idle_keys_should_leave_no_state_behind(self):
        """Test bounded memory: 100,000 distinct keys, nothing kept once idle."""
        limits, q = Limits(), pool.Queue("tenants", concurrency=1, total=50)
        peak = 0
        for batch in range(1_000):
            tickets = [Ticket(task(queue=q, key=f"k{batch}-{i}"), None, 0) for i in range(100)]
            pending = [asyncio.ensure_future(limits.acquire(t)) for t in tickets]
            await settle()
            peak = max(peak, len(limits))
            for ticket, future in zip(tickets, pending, strict=False):
                await future
                limits.release(ticket)
            assert len(limits) == 0
        assert peak <= 101  # the keys of one batch plus the total gate, never the 100,000


class LimitsModel(RuleBasedStateMachine):
    """Random arrivals, completions, cancellations and timeouts against one queue with keys.

    Invariants: never more than the per-key limit or the total running; FIFO
    per key; no waiter left waiting while its slots are free; no call
    granted twice; cancelled (or timed-out) waiters never hold a slot.
    """

    KEYS = ("a", "b", "c")

    def __init__(self):
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.limits = Limits()
        self.waiting: dict[Ticket, asyncio.Task[None]] = {}
        self.running: list[Ticket] = []
        self.arrivals: dict[str, list[Ticket]] = collections.defaultdict(list)
        self.grants: dict[str, list[Ticket]] = collections.defaultdict(list)
        self.gone: set[Ticket] = set()
        self.order: dict[Ticket, int] = {}
        self.deadlines: dict[Ticket, asyncio.Timeout] = {}

    @initialize(concurrency=st.integers(1, 3), total=st.none() | st.integers(1, 5))
    def setup(self, concurrency, total):
        self.queue = pool.Queue("q", concurrency=concurrency, total=total)

    def teardown(self):
        for future in self.waiting.values():
            future.cancel()
        self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()

    def settle(self):
        self.loop.run_until_complete(settle())
        for ticket, future in list(self.waiting.items()):
            if future.done():
                del self.waiting[ticket]
                if future.cancelled() or isinstance(future.exception(), TimeoutError):
                    self.gone.add(ticket)
                else:
                    future.result()
                    assert ticket not in self.running, "granted twice"
                    self.running.append(ticket)
                    self.grants[ticket.task.key].append(ticket)

    async def acquire(self, ticket):
        """Acquire under a deadline the model can make expire (a wait that times out)."""
        async with asyncio.timeout(None) as deadline:
            self.deadlines[ticket] = deadline
            await self.limits.acquire(ticket)

    @rule(key=st.sampled_from(KEYS))
    def arrive(self, key):
        ticket = Ticket(task(queue=self.queue, key=key), None, 0)
        self.order[ticket] = len(self.order)
        self.arrivals[key].append(ticket)
        self.waiting[ticket] = self.loop.create_task(self.acquire(ticket))
        self.settle()

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def complete(self, data):
        ticket = data.draw(st.sampled_from(sorted(self.running, key=self.order.__getitem__)))
        self.running.remove(ticket)
        self.limits.release(ticket)
        self.settle()

    @precondition(lambda self: self.waiting)
    @rule(data=st.data(), timeout=st.booleans())
    def leave(self, data, timeout):
        """A waiter gives up: its task is cancelled, or its deadline expires."""
        ticket = data.draw(st.sampled_from(sorted(self.waiting, key=self.order.__getitem__)))
        if timeout and ticket in self.deadlines:
            self.loop.call_soon(lambda: self.deadlines[ticket].reschedule(self.loop.time()))
        else:
            self.waiting[ticket].cancel()
        self.settle()

    @invariant()
    def limits_hold(self):
        if not hasattr(self, "queue"):
            return
        per_key = collections.Counter(t.task.key for t in self.running)
        assert all(n <= self.queue.concurrency for n in per_key.values())
        if self.queue.total is not None:
            assert len(self.running) <= self.queue.total

    @invariant()
    def fifo_per_key(self):
        for key, granted in self.grants.items():
            arrived = [t for t in self.arrivals[key] if t not in self.gone]
            assert granted == arrived[: len(granted)], f"key {key} granted out of order"

    @invariant()
    def nobody_waits_for_a_free_slot(self):
        if not hasattr(self, "queue"):
            return
        per_key = collections.Counter(t.task.key for t in self.running)
        total_full = self.queue.total is not None and len(self.running) >= self.queue.total
        for ticket in self.waiting:
            assert total_full or per_key[ticket.task.key] >= self.queue.concurrency, "a waiter was lost"

    @invariant()
    def gates_agree_with_the_model(self):
        """Per the gates themselves: a call that left holds nothing; a running call holds all it needs."""
        for gate in self.limits._gates.values():
            assert not self.gone & gate.holders, f"{gate.describe()} is held by a call that left"
        if not hasattr(self, "queue"):
            return
        needed = 2 if self.queue.total is not None else 1
        for ticket in self.running:
            assert len(ticket.held) == needed and all(ticket in g.holders for g in ticket.held)


TestLimitsModel = LimitsModel.TestCase
TestLimitsModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
