"""Tests for pool._transport._chunks: a region sent in chunks arrives whole in the receiver's inbox, and every
region involved goes back to its arena once let go (on success, and when the stream ends mid-way)."""

from __future__ import annotations

import mmap
import os
import secrets

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from pool._transport import _buffers, _chunks, _side
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._session import Session


def _chunks_of(data: bytes, token: int, size: int, step: int) -> list[pb.Chunk]:
    pieces = []
    for start in range(0, len(data), step):
        chunk = pb.Chunk(token=token, size=size, offset=start, data=data[start : start + step])
        chunk.last = start + step >= len(data)
        pieces.append(chunk)
    return pieces


def test_a_spill_should_cut_only_the_buffers_spans_and_mark_the_last_chunk():
    """Test that a spill sends each buffer's bytes (not the region's padding), in order, the last one marked."""
    first, second = os.urandom(3 * 4096 + 5), os.urandom(600 << 10)
    payload = _buffers.pack(b"pickle", [memoryview(first), memoryview(second)])
    region = _buffers.region_of(payload)
    assert region is not None
    spill = _chunks.Spill(payload, region)
    assert region.lent == 2  # the payload, and the spill
    messages = list(spill.frames())
    spill.close()
    spill.close()  # twice is once
    assert region.lent == 1
    got = [message.frames[0].chunk for message in messages]
    assert all(message.frames[0].id == 0 and len(message.frames) == 1 for message in messages)
    assert [chunk.last for chunk in got] == [False] * (len(got) - 1) + [True]
    assert {chunk.token for chunk in got} == {region.token} and {chunk.size for chunk in got} == {region.size}
    (offset_a, _), (offset_b, _) = _buffers.spans(payload)
    assert b"".join(c.data for c in got if c.offset < offset_b) == first
    assert b"".join(c.data for c in got if c.offset >= offset_b) == second
    assert offset_a == 0 and offset_b % mmap.PAGESIZE == 0


def test_an_assembled_region_should_reach_the_inbox_whole_and_return_to_the_arena_when_let_go():
    """Test that the last chunk puts the region in the inbox under the peer's token, and releasing it frees it."""
    token, data = secrets.randbits(64), os.urandom(5 << 20)
    assembly = _chunks.Assembly()
    for chunk in _chunks_of(data, token, 8 << 20, 1 << 20):
        assembly.add(chunk)
    idle_before = _buffers.idle_bytes()  # the region is held: not idle
    fd, holder = _side.take(token)
    try:
        with mmap.mmap(fd, len(data), flags=mmap.MAP_PRIVATE) as mapped:
            assert mapped[:] == data
    finally:
        os.close(fd)
    holder.release(token)
    assert _buffers.idle_bytes() >= idle_before + (8 << 20)  # back in the arena, for the next value


def test_a_region_half_sent_when_the_stream_ends_should_go_back_to_the_arena_and_never_reach_the_inbox():
    """Test that an assembly closed mid-way (the stream failed) frees its region and leaves nothing to take."""
    token, data = secrets.randbits(64), os.urandom(3 << 20)
    assembly = _chunks.Assembly()
    for chunk in _chunks_of(data, token, 4 << 20, 1 << 20)[:-1]:
        assembly.add(chunk)
    idle_before = _buffers.idle_bytes()  # the region is held: not idle
    assembly.close()
    assert _buffers.idle_bytes() >= idle_before + (4 << 20)
    with pytest.raises(LookupError):
        _side.take(token)


def test_a_chunk_past_its_region_should_be_refused():
    """Test that a chunk that overruns the region it names ends the stream (a peer not speaking our protocol)."""
    assembly = _chunks.Assembly()
    with pytest.raises(ValueError, match="overruns"):
        assembly.add(pb.Chunk(token=1, size=1 << 20, offset=(1 << 20) - 10, data=b"x" * 11))
    assembly.close()


def test_a_chunk_announcing_more_than_this_host_maps_should_be_refused_before_anything_is_mapped():
    """Test that a region of 2**40 bytes (a peer holding the secret once mapped a terabyte this way: issue 43)
    ends the stream, and leaves no region behind."""
    assembly = _chunks.Assembly()
    idle_before = _buffers.idle_bytes()
    with pytest.raises(ValueError, match="maps at most"):
        assembly.add(pb.Chunk(token=1, size=1 << 40, offset=0, data=b"x"))
    assert _buffers.idle_bytes() == idle_before
    assembly.close()


def test_a_chunk_announcing_another_size_than_its_first_should_be_refused():
    assembly = _chunks.Assembly()
    assembly.add(pb.Chunk(token=1, size=1 << 20, offset=0, data=b"x"))
    with pytest.raises(ValueError, match="its first"):
        assembly.add(pb.Chunk(token=1, size=1 << 30, offset=1 << 20, data=b"x"))
    assembly.close()


def test_open_regions_per_stream_should_be_capped():
    """Test that a peer opening region after region without finishing any (400 descriptors for 200 tokens,
    issue 43) is stopped at `OPEN_REGIONS_MAX`, and what it opened goes back to the arena."""
    assembly = _chunks.Assembly()
    fds = len(os.listdir("/proc/self/fd"))
    for token in range(_chunks.OPEN_REGIONS_MAX):
        assembly.add(pb.Chunk(token=token, size=4096, offset=0, data=b"x"))
    with pytest.raises(ValueError, match="more than"):
        assembly.add(pb.Chunk(token=10_000, size=4096, offset=0, data=b"x"))
    assembly.close()
    assert len(os.listdir("/proc/self/fd")) <= fds + 2 * _chunks.OPEN_REGIONS_MAX  # a memfd and its mapping each


hostile_chunks = st.builds(
    pb.Chunk,
    token=st.integers(0, 20),
    size=st.sampled_from([0, 1, 4096, 1 << 20, 8 << 20, (8 << 20) + 1, 1 << 40, (1 << 64) - 1]),
    offset=st.sampled_from([0, 1, 4095, 1 << 20, (1 << 64) - 1]),
    data=st.binary(max_size=64),
    last=st.booleans(),
)
garbage_messages = st.one_of(
    st.binary(max_size=300),  # anything at all
    st.lists(hostile_chunks, max_size=6).map(
        lambda chunks: pb.Frames(frames=[pb.Frame(id=0, chunk=c) for c in chunks]).SerializeToString()
    ),
    st.builds(lambda m, n: m[:n], st.just(pb.Frames(frames=[pb.Frame(id=1)]).SerializeToString()), st.integers(0, 4)),
)


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(garbage_messages, max_size=10))
def test_the_frame_decoder_fed_garbage_should_end_the_stream_and_hold_bounded_memory(messages, monkeypatch_map):
    """Test (fuzz, issue 43) that whatever a peer sends once past the handshake (garbage, truncated frames,
    chunks of hostile sizes and offsets), the decoder either takes it or raises, ending the stream; the regions
    it maps for the peer never exceed what this end maps (here 8 MiB), and every one is given back at the end."""
    session = Session(odd=True, host=None, label="fuzz")
    assembly = session._assembly
    for message in messages:
        try:
            session.feed_bytes(message)
        except (DecodeError, ValueError, OverflowError):
            break  # the transport ends the stream: nothing more is read
        finally:
            assert sum(assembly._announced.values()) <= 8 << 20
    session.fail(ConnectionResetError("the end"))
    assert not assembly._open


@pytest.fixture(scope="module")
def monkeypatch_map():
    """This end maps at most 8 MiB of a peer's regions (what a smaller host would)."""
    saved = _chunks.MAP_MAX_BYTES
    _chunks.MAP_MAX_BYTES = 8 << 20  # type: ignore[misc]
    yield
    _chunks.MAP_MAX_BYTES = saved  # type: ignore[misc]
