"""Tests for pool._transport._outbox: batches numbered when taken, so a call knows whether its frame left."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from pool._transport._outbox import Outbox
from pool._transport._proto import leakypool_pb2 as pb


class GatedWrite:
    """A writer that holds each batch until the test opens the gate (an awaited gRPC write)."""

    def __init__(self) -> None:
        self.batches: list[pb.Frames] = []
        self.started = asyncio.Event()
        self.gate = asyncio.Event()

    async def __call__(self, batch: pb.Frames) -> None:
        self.batches.append(batch)
        self.started.set()
        await self.gate.wait()


async def test_a_batch_built_while_another_is_written_should_get_the_next_number():
    """Test that frames added during an awaited write belong to the next batch, not to the one in flight."""
    outbox, write = Outbox(), GatedWrite()
    pump = asyncio.ensure_future(outbox.pump(write))
    try:
        outbox.frame(1)
        first = outbox.batch_number
        await asyncio.wait_for(write.started.wait(), 5)  # batch 1 is being written
        outbox.frame(3)
        second = outbox.batch_number
        assert (first, second, outbox.written) == (1, 2, 0)
        write.started.clear()
        write.gate.set()
        await asyncio.wait_for(write.started.wait(), 5)  # batch 1 written, batch 2 taken
        assert outbox.written >= first
        assert [[frame.id for frame in batch.frames] for batch in write.batches] == [[1], [3]]
    finally:
        pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)


async def test_written_should_count_batches_in_order_whichever_path_sent_them():
    """Test that batches sent at once (`write_now`) and by the writer task number the same way."""
    sent: list[pb.Frames] = []

    def write_now(batch: pb.Frames) -> bool:
        sent.append(batch)
        return True

    async def write(batch: pb.Frames) -> None:  # pragma: no cover - the socket always takes it here
        sent.append(batch)

    outbox = Outbox()
    pump = asyncio.ensure_future(outbox.pump(write, write_now))
    try:
        for call_id in (1, 3, 5):
            outbox.frame(call_id)
            number = outbox.batch_number
            assert number == len(sent) + 1
            async with asyncio.timeout(5):
                while outbox.written < number:
                    await asyncio.sleep(0)
        assert outbox.written == len(sent) == 3
    finally:
        pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)


class FakeSpill:
    """Messages that must precede a batch (`_chunks.Spill`), recording whether the outbox closed it."""

    def __init__(self, *ids: int) -> None:
        self.ids = ids
        self.closed = False

    def frames(self) -> Iterator[pb.Frames]:
        for call_id in self.ids:
            message = pb.Frames()
            message.frames.add().id = call_id
            yield message

    def close(self) -> None:
        self.closed = True


async def test_a_spill_should_leave_before_the_batch_it_was_added_to_and_be_closed():
    """Test that a large value's chunks go before the frame that names them, each its own message."""
    outbox, write = Outbox(), GatedWrite()
    write.gate.set()
    spill = FakeSpill(100, 101)
    pump = asyncio.ensure_future(outbox.pump(write))
    try:
        outbox.frame(1)
        outbox.spill(spill)
        outbox.frame(3)
        async with asyncio.timeout(5):
            while len(write.batches) < 3:
                write.started.clear()
                await write.started.wait()
        assert [[frame.id for frame in batch.frames] for batch in write.batches] == [[100], [101], [1, 3]]
        assert spill.closed and outbox.written == 1  # chunk messages are not batches
    finally:
        pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)


async def test_spills_should_be_closed_when_the_stream_fails_mid_way():
    """Test that a write failing under a spill lets go of it and of the spills behind it (their regions reused)."""

    async def broken(batch: pb.Frames) -> None:
        raise ConnectionResetError("gone")

    outbox = Outbox()
    first, second = FakeSpill(100), FakeSpill(200)
    outbox.frame(1)
    outbox.spill(first)
    outbox.spill(second)
    try:
        await asyncio.wait_for(outbox.pump(broken), 5)
    except ConnectionResetError:
        pass
    assert first.closed and second.closed


async def test_a_call_opened_while_chunks_go_out_should_belong_to_the_next_batch():
    """Test that the batch behind a spill is numbered when taken, so a frame added meanwhile is not counted as sent."""
    outbox, write = Outbox(), GatedWrite()
    pump = asyncio.ensure_future(outbox.pump(write))
    try:
        outbox.frame(1)
        outbox.spill(FakeSpill(100))
        await asyncio.wait_for(write.started.wait(), 5)  # the chunk is being written; batch 1 is taken
        outbox.frame(3)
        assert outbox.batch_number == 2  # frame 3 leaves with batch 2, after batch 1 is written
        write.started.clear()
        write.gate.set()
        async with asyncio.timeout(5):
            while outbox.written < 2:
                write.started.clear()
                await write.started.wait()
        assert [[frame.id for frame in batch.frames] for batch in write.batches] == [[100], [1], [3]]
    finally:
        pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)
