"""Tests for pool._transport._outbox: batches numbered when taken, so a call knows whether its frame left."""

from __future__ import annotations

import asyncio

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
