"""Tests for pool._transport._outgoing: a call this end opened, its replies in order, and every way it ends."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._errors import WorkerBroken
from pool._transport._outgoing import QUEUED, SENT, STARTED, HandedBack, OutgoingCall, is_final
from pool._transport._proto import leakypool_pb2 as pb


class Stream:
    """A `CallStream` that records what the call sends its session."""

    label = "worker 7"

    def __init__(self, written: int = 0) -> None:
        self.written = written
        self.steps: list[tuple[int, int, bytes]] = []
        self.forgotten: list[int] = []

    def step(self, call_id: int, kind: int, value: bytes = b"") -> None:
        self.steps.append((call_id, kind, value))

    def forget(self, call_id: int) -> None:
        self.forgotten.append(call_id)


def outcome(kind: int, value: bytes = b"") -> pb.Frame:
    return pb.Frame(id=3, outcome=pb.Outcome(kind=kind, value=value))


def accept(*, queued: bool = False) -> pb.Frame:
    return pb.Frame(id=3, accept=pb.Accept(queued=queued))


def reject(message: str = "no") -> pb.Frame:
    return pb.Frame(id=3, reject=pb.Reject(code=14, message=message))


STARTED_FRAME = pb.Frame(id=3, started=pb.Started())


def call(*, plain: bool = False, written: int = 0) -> tuple[OutgoingCall, Stream]:
    stream = Stream(written)
    return OutgoingCall(stream, 3, "resize", plain=plain), stream


class TestIsFinal:
    @pytest.mark.parametrize(
        ("frame", "final"),
        [
            (outcome(pb.Outcome.RETURN), True),
            (outcome(pb.Outcome.RAISE), True),
            (outcome(pb.Outcome.STOP), True),
            (outcome(pb.Outcome.CANCELLED), True),
            (outcome(pb.Outcome.YIELD), False),
            (reject(), True),
            (accept(), False),
            (STARTED_FRAME, False),
        ],
        ids=["return", "raise", "stop", "cancelled", "yield", "reject", "accept", "started"],
    )
    def test_is_final_should_be_true_only_when_the_frame_ends_its_call(self, frame, final):
        """Test that a Reject and every outcome but YIELD end a call; Accept, Started and YIELD do not."""
        assert is_final(frame) is final


class TestOutgoingCall:
    async def test_receive_should_return_replies_in_order_when_they_arrived_before_it_was_awaited(self):
        """Test that replies delivered while no one waits are kept, then received in arrival order."""
        c, _ = call()
        frames = [
            accept(),
            outcome(pb.Outcome.YIELD, b"1"),
            outcome(pb.Outcome.YIELD, b"2"),
            outcome(pb.Outcome.RETURN),
        ]
        for frame in frames:
            c.deliver(frame)
        assert [await c.receive() for _ in frames] == frames

    @given(st.lists(st.binary(max_size=8), max_size=12), st.integers(min_value=0, max_value=12))
    def test_receive_should_keep_yields_in_order_when_some_arrive_while_it_waits(self, values, early):
        """Test that yields come out in order however many arrive before the receiver waits and after."""
        loop = asyncio.new_event_loop()
        try:
            received = loop.run_until_complete(self._interleave(values, early))
        finally:
            loop.close()
        assert received == values

    @staticmethod
    async def _interleave(values: list[bytes], early: int) -> list[bytes]:
        c, _ = call()
        for value in values[:early]:
            c.deliver(outcome(pb.Outcome.YIELD, value))
        got = [(await c.receive()).outcome.value for _ in values[:early]]
        for value in values[early:]:
            waiting = asyncio.ensure_future(c.receive())
            await asyncio.sleep(0)  # the receiver is parked on its future now
            c.deliver(outcome(pb.Outcome.YIELD, value))
            got.append((await asyncio.wait_for(waiting, 1)).outcome.value)
        return got

    async def test_receive_should_raise_the_error_when_the_stream_ended_with_one(self):
        """Test that the stream's failure reaches the waiting receiver as a raise, and ends the call."""
        c, _ = call()
        waiting = asyncio.ensure_future(c.receive())
        await asyncio.sleep(0)
        c.deliver(WorkerBroken("gone"))
        with pytest.raises(WorkerBroken, match="gone"):
            await asyncio.wait_for(waiting, 1)
        assert c.finished and isinstance(c.final, WorkerBroken)

    async def test_put_back_should_make_an_item_the_next_received_when_given_back(self):
        """Test that an item given back comes out again before anything queued behind it."""
        c, _ = call()
        c.deliver(accept())
        c.deliver(outcome(pb.Outcome.RETURN))
        first = await c.receive()
        c.put_back(first)
        assert await c.receive() is first
        assert (await c.receive()).outcome.kind == pb.Outcome.RETURN

    def test_deliver_should_keep_the_first_final_item_when_more_arrive_after_the_end(self):
        """Test that ``final`` is the item that ended the call, not a later one."""
        c, _ = call()
        ended = outcome(pb.Outcome.RETURN)
        c.deliver(accept())
        assert c.final is None and not c.finished
        c.deliver(ended)
        c.deliver(WorkerBroken("late"))
        assert c.final is ended

    def test_on_finish_should_run_once_when_the_call_ends_and_at_once_when_already_over(self):
        """Test that each callback runs exactly once: at the end, or on registration after it."""
        c, _ = call()
        seen: list[str] = []
        c.on_finish(lambda _c: seen.append("before"))
        c.deliver(outcome(pb.Outcome.YIELD))
        assert seen == []
        c.deliver(outcome(pb.Outcome.RETURN))
        c.deliver(reject())
        c.on_finish(lambda _c: seen.append("after"))
        assert seen == ["before", "after"]

    async def test_next_item_should_be_done_at_once_when_a_reply_waits_and_resolve_on_the_next_otherwise(self):
        """Test `next_item` (what the call path awaits, with no coroutine of its own): a reply already here is
        returned at once, in order; else the next one resolves it; the stream's end comes as data, not raised."""
        c, _ = call()
        c.deliver(accept())
        ready = c.next_item()
        assert ready.done() and ready.result().HasField("accept")
        pending = c.next_item()
        assert not pending.done()
        c.deliver(outcome(pb.Outcome.RETURN))
        assert (await pending).outcome.kind == pb.Outcome.RETURN
        lost = pool.WorkerBroken("lost")
        c2, _ = call()
        waiting = c2.next_item()
        c2.deliver(lost)
        assert await waiting is lost

    @pytest.mark.parametrize(("written", "sent"), [(4, False), (5, True), (6, True)])
    def test_sent_should_be_true_when_the_session_wrote_the_calls_batch(self, written, sent):
        """Test that a call counts as sent once its session handed its batch to the transport."""
        c, _ = call(written=written)
        c.batch = 5
        assert c.sent is sent


class TestReply:
    def test_reply_should_mark_started_and_hand_nothing_on_when_a_started_frame_arrives(self):
        """Test that Started moves the state on without reaching the receiver."""
        c, _ = call(plain=True)
        assert c.state == SENT
        assert c.reply(STARTED_FRAME) is False
        assert c.state == STARTED and not c._inbox and not c.answered

    @pytest.mark.parametrize(("queued", "state"), [(True, QUEUED), (False, STARTED)])
    def test_reply_should_set_the_state_the_accept_says_when_it_is_the_first_answer(self, queued, state):
        """Test that an Accept makes the call queued or started, and is handed on."""
        c, _ = call(plain=True)
        assert c.reply(accept(queued=queued)) is False
        assert c.state == state and list(c._inbox) == [accept(queued=queued)]

    @pytest.mark.parametrize(
        "answers",
        [[accept(queued=False)], [accept(queued=True), STARTED_FRAME], [STARTED_FRAME, accept(queued=True)]],
    )
    def test_reply_should_call_on_started_once_when_the_callee_says_the_call_began(self, answers):
        """Test the hook an executor's future turns RUNNING on: once, at the Accept that says started or the
        Started frame, never at a queued Accept."""
        c, _ = call(plain=True)
        began = []
        c.on_started = lambda: began.append(c.state)
        c.reply(answers[0])
        assert began == ([] if answers[0] == accept(queued=True) else [STARTED])
        for answer in answers[1:]:
            c.reply(answer)
        assert began == [STARTED] and c.on_started is None

    def test_reply_should_not_move_the_state_back_when_a_queued_accept_follows_a_started(self):
        """Test that a Started that overtook its Accept(queued) leaves the call started."""
        c, _ = call(plain=True)
        c.reply(STARTED_FRAME)
        c.reply(accept(queued=True))
        assert c.state == STARTED

    async def test_reply_should_hand_a_reject_on_as_is_when_it_is_the_first_answer(self):
        """Test that a Reject before any Accept is the callee turning the call away: the frame itself."""
        c, _ = call()
        assert c.reply(reject("busy")) is True
        assert (await c.receive()).reject.message == "busy"
        assert c.finished

    async def test_reply_should_raise_handed_back_when_a_queued_call_is_rejected(self):
        """Test that a Reject after Accept(queued) means the call came back unstarted (placed again)."""
        c, _ = call(plain=True)
        c.reply(accept(queued=True))
        assert c.reply(reject("retiring")) is True
        await c.receive()  # the Accept
        with pytest.raises(HandedBack, match=r"worker 7 handed resize\(\) back: retiring"):
            await c.receive()
        assert c.finished

    async def test_reply_should_raise_worker_broken_when_a_started_call_is_rejected(self):
        """Test that a Reject after the call started means it was lost (it may have run)."""
        c, _ = call(plain=True)
        c.reply(accept())
        c.reply(reject("died"))
        await c.receive()
        with pytest.raises(WorkerBroken, match="died") as raised:
            await c.receive()
        assert not isinstance(raised.value, HandedBack)

    def test_reply_should_report_the_end_only_when_the_outcome_is_final(self):
        """Test that reply returns True for a final outcome and False for a yield."""
        c, _ = call()
        assert c.reply(outcome(pb.Outcome.YIELD)) is False
        assert c.reply(outcome(pb.Outcome.RAISE)) is True


class TestLost:
    @pytest.mark.parametrize(
        ("plain", "answer", "lossless", "handed_back"),
        [
            (True, None, True, True),
            (True, accept(queued=True), True, True),
            (True, accept(), True, False),
            (True, STARTED_FRAME, True, False),
            (True, None, False, False),
            (False, None, True, False),
        ],
        ids=["unanswered", "queued", "accepted", "started", "lossy", "not-plain"],
    )
    async def test_lost_should_hand_back_only_when_a_plain_call_surely_never_started(
        self, plain, answer, lossless, handed_back
    ):
        """Test that a lost stream places a plain call again only if it was read to its end and the call never began."""
        c, _ = call(plain=plain)
        if answer is not None:
            c.reply(answer)
            if not answer.HasField("started"):
                await c.receive()
        c.lost(ConnectionResetError("reset"), lossless=lossless)
        with pytest.raises((HandedBack, ConnectionResetError)) as raised:
            await c.receive()
        assert isinstance(raised.value, HandedBack) is handed_back
        assert c.finished


class TestSteps:
    def test_step_should_send_the_step_for_this_call_when_driving_a_generator(self):
        """Test that step names this call's id to the session."""
        c, stream = call()
        c.step(pb.Step.SEND, b"v")
        assert stream.steps == [(3, pb.Step.SEND, b"v")]

    def test_hand_back_should_ask_once_when_the_call_is_queued(self):
        """Test that hand_back sends one HAND_BACK for a queued call, however often it is asked."""
        c, stream = call(plain=True)
        c.reply(accept(queued=True))
        c.hand_back()
        c.hand_back()
        assert stream.steps == [(3, pb.Step.HAND_BACK, b"")] and c.recalled

    @pytest.mark.parametrize(
        "answer", [None, accept(), STARTED_FRAME, outcome(pb.Outcome.RETURN)], ids=["none", "accept", "started", "over"]
    )
    def test_hand_back_should_do_nothing_when_the_call_is_not_queued(self, answer):
        """Test that a call not waiting in the callee's line (unanswered, started, over) is not asked back."""
        c, stream = call(plain=True)
        if answer is not None:
            c.reply(answer)
        c.hand_back()
        assert stream.steps == [] and not c.recalled

    def test_cancel_should_tell_the_callee_and_forget_the_call_when_it_is_running(self):
        """Test that cancel sends CANCEL, stops routing replies and ends the call here at once."""
        c, stream = call()
        ended: list[OutgoingCall] = []
        c.on_finish(ended.append)
        c.cancel()
        c.cancel()
        assert stream.steps == [(3, pb.Step.CANCEL, b"")] and stream.forgotten == [3]
        assert c.finished and c.cancelled_here and ended == [c] and c.final is None

    def test_cancel_should_do_nothing_when_the_call_is_over(self):
        """Test that a finished call sends nothing when cancelled."""
        c, stream = call()
        c.deliver(outcome(pb.Outcome.RETURN))
        c.cancel()
        assert stream.steps == [] and not c.cancelled_here


class TestAbort:
    async def test_abort_should_return_without_forgetting_when_the_callee_confirms(self):
        """Test that abort waits for the callee's CANCELLED and leaves routing to the session, which saw the end."""
        c, stream = call()
        aborting = asyncio.ensure_future(c.abort(timeout=5))
        await asyncio.sleep(0)
        assert stream.steps == [(3, pb.Step.CANCEL, b"")] and not c.finished
        c.deliver(outcome(pb.Outcome.YIELD))
        c.deliver(outcome(pb.Outcome.CANCELLED))
        await asyncio.wait_for(aborting, 1)
        assert c.finished and c.cancelled_here and stream.forgotten == []
        assert c.final.outcome.kind == pb.Outcome.CANCELLED

    async def test_abort_should_forget_the_call_when_the_callee_does_not_confirm_in_time(self):
        """Test that a callee that ignores the cancel is forgotten after the timeout, and the call ends."""
        c, stream = call()
        await asyncio.wait_for(c.abort(timeout=0.02), 1)
        assert c.finished and stream.forgotten == [3]

    async def test_abort_should_end_the_call_when_the_stream_fails_during_the_wait(self):
        """Test that a failure while waiting for the confirmation is swallowed, and the call is over."""
        c, stream = call()
        aborting = asyncio.ensure_future(c.abort(timeout=5))
        await asyncio.sleep(0)
        c.deliver(WorkerBroken("gone"))
        await asyncio.wait_for(aborting, 1)
        assert c.finished and stream.forgotten == []

    async def test_abort_should_send_nothing_when_the_call_is_over(self):
        """Test that aborting a finished call neither cancels nor waits."""
        c, stream = call()
        c.deliver(outcome(pb.Outcome.RETURN))
        await asyncio.wait_for(c.abort(timeout=5), 1)
        assert stream.steps == [] and not c.cancelled_here
