"""Tests for pool._transport._session: routing, batching and failure of a multiplexed stream (in memory)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

import pool
from pool._call._calls import TRANSIENT_CODES, rejection
from pool._transport._outgoing import HandedBack
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._session import Session
from tests.unit.pool._transport.pipes import SessionPair


class Host:
    """A CallHost that records calls and lets the test answer them."""

    def __init__(self):
        self.calls: list[tuple[Session, pb.Frame]] = []
        self.steps: list[pb.Frame] = []
        self.ended = asyncio.Event()
        self.arrived = asyncio.Event()

    def on_call(self, session, frame):
        self.calls.append((session, frame))
        self.arrived.set()

    def on_step(self, session, frame):
        self.steps.append(frame)
        self.arrived.set()

    def on_session_end(self, session):
        self.ended.set()


class Link(SessionPair):
    """A caller (odd) and a callee (even) joined in memory (`pipes.SessionPair`)."""

    def __init__(self, host):
        super().__init__(Session(odd=True, host=None, label="caller"), Session(odd=False, host=host, label="callee"))
        self.caller, self.callee = self.odd, self.even


def open_call(session, name="f"):
    call, message = session.open(name)
    message.routine.name = name
    return call


class TestSession:
    async def test_call_should_reach_the_host_and_its_replies_the_caller(self):
        """Test one call's life: Call -> Accept -> Outcome, ids odd, the call then closed."""
        host = Host()
        async with Link(host) as link:
            call = open_call(link.caller)
            await asyncio.wait_for(host.arrived.wait(), 5)
            session, frame = host.calls[0]
            assert frame.id % 2 == 1 and frame.call.routine.name == "f"
            session.accept(frame.id)
            session.outcome(frame.id, pb.Outcome.RETURN, b"v")
            assert (await asyncio.wait_for(call.receive(), 5)).HasField("accept")
            outcome = (await asyncio.wait_for(call.receive(), 5)).outcome
            assert (outcome.kind, outcome.value) == (pb.Outcome.RETURN, b"v")
            assert call.finished and link.caller.open_calls == 0

    async def test_frames_made_in_one_loop_turn_should_leave_in_one_message(self):
        """Test the batching that makes many small calls cheap."""
        host = Host()
        async with Link(host) as link:
            for _ in range(50):
                open_call(link.caller)
            async with asyncio.timeout(5):
                while len(host.calls) < 50:
                    host.arrived.clear()
                    await host.arrived.wait()
            assert link.messages_to_even == 1

    async def test_stream_end_should_fail_every_open_call_and_tell_the_host(self):
        """Test that nothing waits forever when the stream dies."""
        host = Host()
        async with Link(host) as link:
            calls = [open_call(link.caller) for _ in range(3)]
            await asyncio.wait_for(host.arrived.wait(), 5)
            link.to_odd.put_nowait(grpc.aio.EOF)
            link.to_even.put_nowait(grpc.aio.EOF)
            for call in calls:
                with pytest.raises(pool.WorkerBroken, match="lost"):
                    await asyncio.wait_for(call.receive(), 5)
            await asyncio.wait_for(host.ended.wait(), 5)
            with pytest.raises(pool.WorkerBroken):
                link.caller.open("g")

    async def test_cancel_should_send_cancel_and_ignore_late_replies(self):
        """Test that a cancelled call is forgotten at once and its late outcome dropped."""
        host = Host()
        async with Link(host) as link:
            call = open_call(link.caller)
            await asyncio.wait_for(host.arrived.wait(), 5)
            host.arrived.clear()
            call.cancel()
            await asyncio.wait_for(host.arrived.wait(), 5)
            assert host.steps[0].step.kind == pb.Step.CANCEL
            session, frame = host.calls[0]
            session.outcome(frame.id, pb.Outcome.CANCELLED)  # the late reply
            host.arrived.clear()
            follow_up = open_call(link.caller, "g")  # a later call, answered after the late reply
            await asyncio.wait_for(host.arrived.wait(), 5)
            session.accept(host.calls[1][1].id)
            assert (await asyncio.wait_for(follow_up.receive(), 5)).HasField("accept")
            assert call.finished and not call._inbox and call.final is None  # the late reply was dropped
            assert link.caller.open_calls == 1  # only the follow-up

    async def test_finish_should_flush_queued_frames_before_ending_the_stream(self):
        """Test that a draining worker's last outcomes are not lost."""
        host = Host()
        async with Link(host) as link:
            call = open_call(link.caller)
            await asyncio.wait_for(host.arrived.wait(), 5)
            session, frame = host.calls[0]
            session.accept(frame.id)
            session.outcome(frame.id, pb.Outcome.RETURN, b"last")
            session.finish()
            await asyncio.wait_for(call.receive(), 5)
            assert (await asyncio.wait_for(call.receive(), 5)).outcome.value == b"last"

    async def test_a_held_accept_should_leave_with_the_outcome_in_one_message(self):
        """Test the worker's quick path: a call that ends at once costs one write, its outcome in its Accept's place."""
        host = Host()
        async with Link(host) as link:
            call = open_call(link.caller)
            await asyncio.wait_for(host.arrived.wait(), 5)
            session, frame = host.calls[0]
            session.accept(frame.id, hold_s=30.0)
            await asyncio.sleep(0)  # a loop turn: a frame not held would leave now
            await asyncio.sleep(0)
            assert link.messages_to_odd == 0
            session.outcome(frame.id, pb.Outcome.RETURN, b"v")
            # The outcome takes the held Accept's place: one frame, read as both (`_calls.judge_first`).
            assert (await asyncio.wait_for(call.receive(), 5)).outcome.value == b"v"
            assert link.messages_to_odd == 1 and link.frames_to_odd == 1

    async def test_a_held_accept_should_leave_alone_after_its_hold_or_when_released(self):
        """Test that a call that does not end at once is accepted anyway, within the hold (or at `release`)."""
        host = Host()
        async with Link(host) as link:
            timed, released = open_call(link.caller), open_call(link.caller)
            async with asyncio.timeout(5):
                while len(host.calls) < 2:
                    host.arrived.clear()
                    await host.arrived.wait()
            session = host.calls[0][0]
            session.accept(host.calls[0][1].id, hold_s=0.01)
            assert (await asyncio.wait_for(timed.receive(), 5)).HasField("accept")
            session.accept(host.calls[1][1].id, hold_s=30.0)
            session.release()
            assert (await asyncio.wait_for(released.receive(), 5)).HasField("accept")

    async def test_a_call_should_know_whether_its_call_frame_left(self):
        """Test `sent`, which tells a worker that never got the call from one that may have started it."""
        host = Host()
        async with Link(host) as link:
            call = open_call(link.caller)
            assert not call.sent
            await asyncio.wait_for(host.arrived.wait(), 5)
            assert call.sent
            later = open_call(link.caller, "g")
            assert not later.sent


class TestLosslessEnd:
    """A stream whose transport read all the peer wrote (a dead local worker): which calls are placed again."""

    @staticmethod
    async def _end(session, replies, last_words=()):
        """Run ``session`` on a stream that delivers ``replies``, then ends; ``last_words`` arrive as it ends."""
        incoming: asyncio.Queue = asyncio.Queue()
        for frames in replies:
            incoming.put_nowait(frames)
        incoming.put_nowait(None)  # the end

        def read_rest():
            for frames in last_words:  # what the transport reads off a dead peer's socket as the stream ends
                session.feed(frames)
            return True

        async def write(message):
            pass

        lost = lambda exc: pool.WorkerBroken(f"lost: {exc}", "UNAVAILABLE")
        await asyncio.wait_for(session.run(incoming.get, write, lost, read_to_end=read_rest), 5)

    @staticmethod
    def _frames(call_id, body, **fields):
        frames = pb.Frames()
        frame = frames.frames.add()
        frame.id = call_id
        getattr(frame, body).SetInParent()
        for name, value in fields.items():
            setattr(getattr(frame, body), name, value)
        return frames

    async def test_plain_calls_the_peer_never_said_it_started_should_be_handed_back(self):
        """Test the rule: a plain call is placed again unless an Accept to start or a Started for it was read."""
        session = Session(odd=True, host=None, label="w")
        unanswered, queued, started, accepted = (session.open("f", plain=True)[0] for _ in range(4))
        routine = session.open("g")[0]  # a routine may run before its Accept leaves: its fate is unknown
        replies = [
            self._frames(queued.id, "accept", queued=True),
            self._frames(started.id, "accept", queued=True),
            self._frames(started.id, "started"),
            self._frames(accepted.id, "accept"),
        ]
        await self._end(session, replies)
        for call in (unanswered, queued):
            with pytest.raises(HandedBack):
                await self._last(call)
        for call in (started, accepted, routine):
            with pytest.raises(pool.WorkerBroken):
                await self._last(call)

    @staticmethod
    async def _last(call):
        async with asyncio.timeout(5):
            while True:  # past its Accept
                await call.receive()

    async def test_what_a_dead_peer_wrote_last_should_count_before_its_calls_are_failed(self):
        """Test that a Started read off the socket as the stream ends is seen: that call is lost, never run again.

        A failed write ends a stream before the transport's last read; the
        call must not be taken for unstarted because its Started came after.
        """
        session = Session(odd=True, host=None, label="w")
        call = session.open("f", plain=True)[0]
        await self._end(session, [self._frames(call.id, "accept", queued=True)], [self._frames(call.id, "started")])
        with pytest.raises(pool.WorkerBroken):
            await self._last(call)

    async def test_accepted_on_wire_should_say_whether_the_turns_accept_reached_the_kernel(self):
        """Test `accepted_on_wire` after a turn's flush: the thread lands a Started unless the Accept left."""
        cases = (  # (the transport says its bytes are in the kernel, a thread may write, write_now takes it): expected
            ((True, True, True), True),
            ((False, True, True), False),  # the Accept waits in the transport
            ((True, True, False), False),  # the socket is full: the Accept waits for the writer task
            ((None, None, True), True),  # gRPC: never read to its end, so nothing to land
        )
        for (on_wire, thread_write, takes), expected in cases:
            session = Session(odd=False, host=None, label="d")
            written: list[pb.Frames] = []

            def write_now(frames, written=written, takes=takes):
                if takes:
                    written.append(frames)
                return takes

            async def write(message):
                pass

            incoming: asyncio.Queue = asyncio.Queue()
            direct = {"write_now": write_now}
            if thread_write:
                direct["thread_write"] = lambda frames, land, loop: True
            if on_wire is not None:
                direct["on_wire"] = lambda on_wire=on_wire: on_wire
            running = asyncio.ensure_future(session.run(incoming.get, write, pool.WorkerBroken, **direct))
            for _ in range(2):
                await asyncio.sleep(0)  # run starts, then its writer (a stream's first message comes later still)
            session.accept(1)
            session.accept(3, queued=True)
            checked: list[bool] = []
            asyncio.get_running_loop().call_soon(lambda c=checked, s=session: c.append(s.accepted_on_wire()))
            await asyncio.sleep(0)  # the turn ends: the outbox flushes (scheduled first), then the check
            assert checked == [expected]
            assert [[f.id for f in m.frames] for m in written] == ([[1, 3]] if takes else [])  # one write
            incoming.put_nowait(None)
            await asyncio.wait_for(running, 5)


class TestRejection:
    @pytest.mark.parametrize("code", sorted(TRANSIENT_CODES))
    def test_rejection_should_be_transient_for_transient_codes(self, code):
        """Test that busy/draining/timeouts keep the worker (WorkerRejected)."""
        reject = pb.Reject(code=grpc.StatusCode[code].value[0], message="busy")
        error = rejection(reject, "worker w", "f")
        assert isinstance(error, pool.WorkerRejected) and error.code == code

    @pytest.mark.parametrize("code", ["INTERNAL", "UNIMPLEMENTED", "FAILED_PRECONDITION", "UNAUTHENTICATED"])
    def test_rejection_should_be_hard_for_other_codes(self, code):
        """Test that anything else is a broken worker (the pool evicts it)."""
        reject = pb.Reject(code=grpc.StatusCode[code].value[0], message="no")
        error = rejection(reject, "worker w", "f")
        assert isinstance(error, pool.WorkerBroken) and error.code == code
