"""Large values (issue 34): a 1 GiB argument and result cross to a worker and back, over either transport.

The worker's answer window (`ACCEPT_TIMEOUT_S`) times the worker, not the
wire: a call whose frame takes longer than the window to write or read is
never taken for a worker that did not answer (it used to end in
`NoWorkersAvailable`). Each test frees its arrays as soon as it has
compared them, to keep the run's peak memory to a few copies of the payload.
"""

from __future__ import annotations

import contextlib
import gc
import mmap
from collections.abc import AsyncIterator

import pytest

import pool
from pool._transport import _side
from tests.integration.routines import common as routines
from tests.integration.routines import large_routines
from tests.integration.support.workers import worker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

np = pytest.importorskip("numpy")

GIB = 1 << 30


def _payload_array() -> object:
    """1 GiB of float64, every element distinct (a misplaced chunk would show)."""
    return np.arange(GIB // 8, dtype=np.float64)


def _payload_bytes() -> bytes:
    """1 GiB of bytes, every 8-byte word distinct."""
    return np.arange(GIB // 8, dtype=np.int64).tobytes()


async def _echo_both() -> None:
    data = _payload_bytes()
    back = await routines.echo(data)
    assert type(back) is bytes and len(back) == GIB and back == data
    del data, back
    gc.collect()
    array = _payload_array()
    back = await routines.echo(array)
    assert isinstance(back, np.ndarray) and back.dtype == np.float64 and back.shape == array.shape
    assert np.array_equal(back, array)
    del array, back
    gc.collect()


async def test_echo_of_1_gib_should_come_back_equal_over_the_unix_socket():
    async with pool.WorkerPool(spawn=2):
        await _echo_both()


@contextlib.asynccontextmanager
async def _one_worker(transport: str) -> AsyncIterator[None]:
    """A pool of one worker: its own over a unix socket, or one started on loopback TCP (gRPC: chunks)."""
    if transport == "unix":
        async with pool.WorkerPool(spawn=1):
            yield
        return
    async with worker("--host", "127.0.0.1", "--port", "0") as w:
        async with pool.WorkerPool(discovery=pool.StaticDiscovery([f"127.0.0.1:{w.port}"])) as p:
            await p.wait_for_workers(1, timeout=30)
            yield


@pytest.mark.parametrize("transport", ["unix", "grpc"])
async def test_arrays_should_cross_with_value_semantics_and_come_back_writable(transport):
    """Test that a worker writing to an array it got changes neither the caller's array nor what it sent back later.

    Over gRPC the buffers cross in chunks into a region of the receiver's
    own (reused from round to round), mapped privately as on a unix socket.
    """
    array = np.zeros(4 << 20)  # 32 MiB: out of band
    async with _one_worker(transport):
        for round_ in range(1, 4):  # the regions are reused between rounds
            back = await large_routines.bump_first(array)
            assert back[0] == 1.0 and array[0] == 0.0 and back.flags.writeable
            back[1] = round_
            assert array[1] == 0.0
            base = back.base
            while isinstance(base, np.ndarray):
                base = base.base
            assert isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)  # mapped, not read off the stream
        assert await large_routines.arrived_mapped(array)  # the argument too


@pytest.mark.parametrize("ready", [False, True], ids=["sent-while-starting", "sent-once-ready"])
async def test_a_new_pools_first_large_argument_should_cross_out_of_band_and_so_should_the_next(ready):
    """Test that a large value sent on a stream's first turn does not go in band, nor leave its stream in band.

    The side connection used to open beside the Dispatch stream without the
    session waiting for it: a call queued while the worker started, or sent
    just after it was ready, found it not yet up and went in band; worse,
    while the loop pickled and wrote that value the side connection's own
    opening timed out, and every later large value on the stream went in
    band too (a 1 GiB echo took 20-29 s instead of 2).
    """
    array = np.arange(4 << 20, dtype=np.float64)  # 32 MiB
    async with pool.WorkerPool(spawn=1) as p:
        if ready:
            await p.wait_for_workers(1, timeout=30)
        assert await large_routines.arrived_mapped(array)
        assert await large_routines.arrived_mapped(array)


async def test_a_first_large_argument_over_grpc_should_cross_in_chunks_not_in_one_message(monkeypatch):
    """Test that the first call to a worker over gRPC carries its large argument out of band (in chunks).

    A value is packed when its call is made: before the first gRPC stream
    ran, this process did not yet know it had a peer that takes buffers out
    of band, so the first call's value went in band, one message the size of
    the value (a 1 GiB echo took 19 s instead of 4).
    """
    array = np.arange(4 << 20, dtype=np.float64)  # 32 MiB
    # As in a process whose first worker is this one: what earlier tests' pools taught this process goes.
    monkeypatch.setattr(_side, "_expected", False)
    monkeypatch.setattr(_side, "_channels", {})
    async with _one_worker("grpc"):
        assert await large_routines.arrived_mapped(array)


async def test_echo_of_1_gib_should_come_back_equal_over_grpc():
    async with worker("--host", "127.0.0.1", "--port", "0") as w:
        discovery = pool.StaticDiscovery([f"127.0.0.1:{w.port}"])
        async with pool.WorkerPool(discovery=discovery) as p:
            await p.wait_for_workers(1, timeout=30)
            await _echo_both()


@pytest.mark.parametrize("transport", ["unix", "tcp"])
async def test_a_relayed_nested_call_turned_away_once_should_send_its_large_argument_again(transport, tmp_path):
    """Test that a nested call's large argument survives the call being offered twice.

    The pool relays a worker's nested call; the first worker offered it turns
    it away (`TurnAwayOnce`), so the pool sends the argument again. It used
    to be put back in band by unpickling what had arrived, which takes the
    region's descriptor: the second offer found it gone. The pool now copies
    what arrived into a region of its own once (no unpickling) and lends
    that as often as needed; the argument still arrives out of band.
    """
    array = np.arange(4 << 20, dtype=np.float64)  # 32 MiB
    hook = large_routines.TurnAwayOnce(str(tmp_path / "turned-away"), "checksum")
    async with pool.WorkerPool(spawn=2, local_transport=transport, backpressure=hook):
        assert await large_routines.checksum_nested(array) == (float(array.sum()), True)
    assert (tmp_path / "turned-away").exists()  # it was turned away once
