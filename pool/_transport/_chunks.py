"""Large buffers in chunks on the stream itself, for a peer with no side connection (gRPC: a LAN worker).

A payload whose buffers are out of band (`_buffers`) names a region. Over
a unix socket the region's descriptor crosses the side connection; over
gRPC there is none, so the region's bytes cross the Dispatch stream as
`Chunk` frames (frame id 0), each its own message of `CHUNK_BYTES` at
most, all before the frame that names the region:

    sender                                       receiver
    Session.carry: Spill(region) -> Outbox       Session.feed: Assembly.add(chunk)
    Outbox.pump: the spill's chunks, then          copies it into a region of its own arena
                 the batch with the frame          the last one: the region into the inbox
                                                 _wire.loads -> _buffers.unpack: mapped, no copy

Neither end holds another copy of the whole value: the sender copies one
chunk at a time out of its region (lent to the spill until it is sent),
the receiver one chunk at a time into its region, which it maps privately
for the value as if the descriptor had come over a side connection (so
arrays arrive writable, with value semantics, and the pages are reused
for the next large value: no page faults per call).

A peer announces each region's size in its chunks, and a region of that
size is mapped here for it, so what it announces is checked (issue 43): a
region is at most `MAP_MAX_BYTES` (this host's memory: no value could be
larger), every chunk of one region announces the same size and fits in
it, and a stream has at most `OPEN_REGIONS_MAX` regions arriving at once,
`MAP_MAX_BYTES` in all. A peer past any of these ends its stream.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Final

from . import _buffers, _side
from ._proto import leakypool_pb2 as pb

CHUNK_BYTES: Final[int] = 1 << 20
"""The most bytes one chunk carries: big enough that a GiB costs a thousand messages, small enough that
the copies on the way (protobuf, gRPC) stay in cache (1, 2 and 4 MiB measured alike; 16 MiB 1.5-2x slower),
and that a chunk's frame fits one gRPC message (`_pieces.PIECE_BYTES`: no gRPC message is large, issue 43).
Frames queued while a value's chunks go out leave after its last chunk."""

OPEN_REGIONS_MAX: Final[int] = 16
"""Regions a peer may be sending in chunks on one stream at once (a sender has one at a time per value; a
call's arguments and a nested call's may interleave): past it, the stream ends (each is a descriptor and a mapping)."""


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 1 << 40


MAP_MAX_BYTES: Final[int] = _memory_bytes()
"""The most a peer's regions may announce, one or all those open on a stream: this host's memory (a value larger
could not be received anyway; without the bound a chunk announcing 2**40 bytes mapped a terabyte of address space)."""


class Spill:
    """The chunks of one region, for the outbox to send before the batch holding the frame that names it.

    The region is lent to the spill (not reused) until `close`, which the
    outbox calls once the chunks are sent or the stream is gone.
    """

    __slots__ = ("_region", "_spans", "_token")

    def __init__(self, payload: bytes, region: _buffers.Region) -> None:
        self._region: _buffers.Region | None = region
        self._token = region.token
        self._spans = _buffers.spans(payload)
        region.take()

    def frames(self) -> Iterator[pb.Frames]:
        """One message per chunk, the last one marked."""
        region = self._region
        if region is None:
            return
        pieces = [
            (start, min(CHUNK_BYTES, offset + length - start))
            for offset, length in self._spans
            for start in range(offset, offset + length, CHUNK_BYTES)
        ]
        with memoryview(region.mem) as mem:
            for index, (start, length) in enumerate(pieces):
                message = pb.Frames()
                chunk = message.frames.add().chunk
                chunk.token, chunk.size, chunk.offset = self._token, region.size, start
                chunk.data = bytes(mem[start : start + length])
                chunk.last = index == len(pieces) - 1
                yield message

    def close(self) -> None:
        """The chunks are sent (or never will be): the region may be reused once nothing else holds it."""
        if self._region is not None:
            self._region = None
            _buffers.returned(self._token)


class _Held:
    """Stands for the peer in the inbox: letting go of an assembled region gives it back to this arena."""

    __slots__ = ("_token",)

    def __init__(self, token: int) -> None:
        self._token = token

    def release(self, token: int) -> None:
        _buffers.returned(self._token)


class Assembly:
    """The regions a peer is sending in chunks on one stream, until each is complete (then in the inbox)."""

    __slots__ = ("_announced", "_open")

    def __init__(self) -> None:
        self._open: dict[int, _buffers.Region] = {}  # the peer's token -> the region its chunks go into
        self._announced: dict[int, int] = {}  # the peer's token -> the size its first chunk announced

    def add(self, chunk: pb.Chunk) -> None:
        """Copy ``chunk`` into its region; the last one hands the region to the inbox under the peer's token.

        Raises:
            ValueError: the chunk does not fit the region it names, or announces a region this end will not
                map (a peer that does not speak our protocol, or a hostile one): the stream ends.
        """
        region = self._open.get(chunk.token)
        if region is None:
            self._check_new(chunk.size)
            region = self._open[chunk.token] = _buffers.receiving(chunk.size)
            self._announced[chunk.token] = chunk.size
        elif chunk.size != self._announced[chunk.token]:
            raise ValueError(
                f"a chunk announces a region of {chunk.size} bytes, its first {self._announced[chunk.token]}"
            )
        data = chunk.data
        end = chunk.offset + len(data)
        if end > chunk.size or chunk.size > region.size:
            raise ValueError(f"a chunk of {len(data)} bytes at {chunk.offset} overruns its region of {chunk.size}")
        region.mem[chunk.offset : end] = data
        if chunk.last:
            del self._open[chunk.token], self._announced[chunk.token]
            _side.keep(chunk.token, os.dup(region.fd), _Held(region.token))

    def _check_new(self, size: int) -> None:
        if len(self._open) >= OPEN_REGIONS_MAX:
            raise ValueError(f"a peer opened more than {OPEN_REGIONS_MAX} regions at once on one stream")
        if not 0 < size <= MAP_MAX_BYTES - sum(self._announced.values()):
            raise ValueError(
                f"a chunk announces a region of {size} bytes; this end maps at most {MAP_MAX_BYTES} in all"
            )

    def close(self) -> None:
        """The stream is gone: the regions still being sent are given back."""
        regions, self._open = self._open, {}
        self._announced.clear()
        for region in regions.values():
            _buffers.returned(region.token)
