"""Tests for pool._worker._unix_server: a worker's unix socket, its door, and the watch thread's answers.

A real `WorkerService` behind a real `UnixServer` on a socket in a temporary folder, dialled by the pool's own
`UnixChannel` or, where a test must control each byte (the watch thread's path), by a blocking socket on a
thread of the test's own. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import struct
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import pool
from pool._call._calls import call_routine, open_call
from pool._call._task import CallRecord
from pool._transport import _side, _wire
from pool._transport._framing import framed, hello
from pool._transport._handshake import Dialler, Keyring, Refused
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._session import Session
from pool._transport._trust import Trust
from pool._transport._unix_channel import UnixChannel
from pool._worker import _unix_server
from pool._worker._service import WorkerService
from pool._worker._unix_server import UnixServer, _listen, _recv

WAIT_S = 5.0
UID = uuid.UUID(int=77)
TRUST = Trust(Keyring(["the secret"]), frozenset({os.getuid()}))


async def double(x: int) -> int:
    return 2 * x


@pytest.fixture(autouse=True)
def side_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Leave the process-wide side-connection state (a dialler sets it) as this test found it."""
    monkeypatch.setattr(_side, "_expected", _side._expected)
    before = dict(_side._channels)
    yield
    for key, channel in list(_side._channels.items()):
        if key not in before:
            channel.close()


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "worker.sock")


@contextlib.asynccontextmanager
async def serving(path: str, *, inline: bool = False, trust: Trust = TRUST) -> AsyncIterator[UnixServer]:
    service = WorkerService(uid=str(UID), backpressure=None, inline=inline)
    service.start()
    server = UnixServer(service, path, trust)
    try:
        await server.start()
        yield server
    finally:
        await server.aclose()
        await service.aclose()


def unframed(sock: socket.socket) -> bytes:
    """One framed message read from a blocking socket (b"" if it closed first)."""
    header = b""
    while len(header) < 4:
        more = sock.recv(4 - len(header))
        if not more:
            return b""
        header += more
    (size,) = struct.unpack(">I", header)
    body = b""
    while len(body) < size:
        more = sock.recv(size - len(body))
        if not more:
            return b""
        body += more
    return body


class ThreadDialler:
    """A dialler on a thread of its own, with a blocking socket: hello, challenge, proof, then ``request``.

    Its ``reply``: the worker's answer, or b"" if the worker closed the connection instead.
    """

    def __init__(self, sock: socket.socket, method: str, request: bytes, keys: Keyring = TRUST.keyring) -> None:
        self.sock = sock
        self.method = method
        self.request = request
        self.keys = keys
        self.reply: bytes | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="test-dialler")

    def _run(self) -> None:
        try:
            self.sock.settimeout(WAIT_S)
            dialler = Dialler(self.keys, self.method, UID)
            self.sock.sendall(framed(hello(self.method)) + framed(dialler.challenge()))
            answer = unframed(self.sock)
            if not answer:
                self.reply = b""
                return
            self.sock.sendall(framed(dialler.proof(answer)) + self.request)
            self.reply = unframed(self.sock)
        except ConnectionError:  # closed by the worker while this was writing, or with bytes of ours unread
            self.reply = b""
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.error = exc

    def start(self) -> None:
        self.thread.start()

    def join(self) -> bytes:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error
        assert self.reply is not None
        return self.reply


def connected(path: str) -> socket.socket:
    """A connection to ``path``, made now: waiting in the listener's backlog until someone accepts it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(WAIT_S)
    sock.connect(path)
    return sock


class TestListen:
    def test_listen_should_make_the_socket_owner_only_when_the_umask_is_open(self, path):
        """Test that the socket is 0600 whatever the umask: a standalone worker's socket is no open door."""
        old = os.umask(0)
        try:
            sock = _listen(path)
        finally:
            os.umask(old)
        with sock:
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
            assert not sock.getblocking()

    def test_listen_should_replace_a_stale_socket_when_one_is_left_at_the_path(self, path):
        """Test that a socket left by a worker killed before it removed it does not stop the next one."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
            stale.bind(path)
        with _listen(path), connected(path):
            pass

    def test_listen_should_leave_anything_else_alone_when_it_is_not_a_socket(self, path):
        """Test that a file that is not a socket is never removed: binding fails instead."""
        with open(path, "w") as f:
            f.write("keep me")
        with pytest.raises(OSError):
            _listen(path).close()  # (were it made, it would not be left open)
        with open(path) as f:
            assert f.read() == "keep me"


class TestRecv:
    def test_recv_should_return_what_waits_when_data_came(self):
        """Test that what the peer sent is returned at once."""
        a, b = socket.socketpair()
        with a, b:
            b.sendall(b"hello")
            assert _recv(a, time.monotonic() + WAIT_S) == b"hello"

    def test_recv_should_raise_timeout_when_nothing_came_by_the_deadline(self):
        """Test that a silent peer costs the watch thread its deadline at most (one already past: no wait)."""
        a, b = socket.socketpair()
        with a, b:
            with pytest.raises(TimeoutError):
                _recv(a, time.monotonic() - 1.0)
            with pytest.raises(TimeoutError):
                _recv(a, time.monotonic() + 0.01)

    def test_recv_should_raise_connection_reset_when_the_peer_hung_up(self):
        """Test that a peer that closed is told apart from a slow one."""
        a, b = socket.socketpair()
        with a:
            b.close()
            with pytest.raises(ConnectionResetError):
                _recv(a, time.monotonic() + WAIT_S)


class TestUnixServer:
    async def test_state_should_be_answered_when_a_trusted_dialler_asks(self, path):
        """Test a State call through the pool's own dialler: the service's state, this worker's uid."""
        async with serving(path):
            channel = UnixChannel(path, TRUST, UID)
            try:
                state = await channel.state(WAIT_S)
            finally:
                await channel.close()
        assert state.uid == str(UID) and state.accepting
        assert not os.path.exists(path)  # removed on aclose

    async def test_stop_should_drain_the_service_when_a_dispatcher_asks(self, path):
        """Test a Stop call: the worker drains and says so."""
        async with serving(path) as server:
            channel = UnixChannel(path, TRUST, UID)
            try:
                state = await channel.stop(1.0, WAIT_S)
            finally:
                await channel.close()
            assert not state.accepting
            assert server._service.exit_reason == "asked to stop by a dispatcher"

    async def test_start_should_refuse_a_dialler_without_the_secret_and_go_on_serving(self, path):
        """Test that a dialler that cannot prove itself is turned away, and the next one is answered."""
        async with serving(path):
            stranger = UnixChannel(path, Trust(Keyring(["another secret"]), TRUST.uids), UID)
            friend = UnixChannel(path, TRUST, UID)
            try:
                with pytest.raises(Refused):
                    await stranger.state(WAIT_S)
                assert (await friend.state(WAIT_S)).uid == str(UID)
            finally:
                await stranger.close()
                await friend.close()

    async def test_dispatch_should_run_calls_and_take_the_side_connection_when_a_pool_connects(self, path):
        """Test a pool's Dispatch stream end to end, and its Buffers connection registered by the pool's pid."""
        async with serving(path, inline=True):
            channel = UnixChannel(path, TRUST, UID)
            caller = Session(odd=True, host=None, label="test pool")
            running = asyncio.ensure_future(channel.run(caller, lambda exc: pool.WorkerBroken(str(exc))))

            class Dispatcher:
                async def dispatch(self, task: CallRecord, parent: Any = None) -> Any:
                    return await open_call(caller, task)

            try:
                blob = _wire.dumps(double, what="routine")
                task = CallRecord("double", False, _wire.digest(blob), blob, _wire.pack_args("double", (21,), {}))
                assert await asyncio.wait_for(call_routine(Dispatcher(), task), WAIT_S) == 42
                async with asyncio.timeout(WAIT_S):
                    while _side.channel(os.getpid()) is None:  # the worker's end of the side connection
                        await asyncio.sleep(0.005)
            finally:
                await channel.close()
                await asyncio.wait_for(running, WAIT_S)

    async def test_request_timeout_should_close_a_connection_when_its_request_never_comes(
        self, path, monkeypatch, caplog
    ):
        """Test that a dialler that proves itself and then says nothing is closed, and logged."""
        monkeypatch.setattr(_unix_server, "REQUEST_TIMEOUT_S", 0.05)
        async with serving(path):
            client = ThreadDialler(connected(path), "State", b"")  # proves itself, sends no request
            with client.sock:
                client.start()
                assert await asyncio.to_thread(client.join) == b""  # closed, unanswered
        assert "closing a unix-socket connection" in caplog.text


class TestAnswerWaiting:
    """The watch thread's path, run here on the test's thread while the loop is held (it never runs meanwhile)."""

    async def test_answer_waiting_should_answer_state_without_the_loop_when_a_routine_holds_it(self, path, monkeypatch):
        """Test that a State call waiting to be accepted is answered by the watch alone (the loop never turns)."""
        monkeypatch.setattr(_unix_server, "WATCH_READ_S", WAIT_S)  # the dialler thread may be slow to be scheduled
        async with serving(path, inline=True) as server:
            client = ThreadDialler(connected(path), "State", framed(pb.StateRequest().SerializeToString()))
            with client.sock:
                client.start()
                server._answer_waiting()  # no await: the loop does not run until it returns
                reply = client.join()
        assert pb.WorkerState.FromString(reply).uid == str(UID)

    async def test_answer_waiting_should_hand_other_calls_to_the_loop_when_they_are_not_state(self, path):
        """Test that a Stop (or Dispatch) call the watch took is served by the loop once it is back."""
        async with serving(path, inline=True) as server:
            request = framed(pb.StopRequest(grace=1.0).SerializeToString())
            client = ThreadDialler(connected(path), "Stop", request)
            with client.sock:
                client.start()
                server._answer_waiting()
                reply = await asyncio.to_thread(client.join)
            assert not pb.WorkerState.FromString(reply).accepting
            assert server._service.exit_reason == "asked to stop by a dispatcher"

    async def test_answer_waiting_should_close_a_connection_when_its_state_request_is_oversized(
        self, path, monkeypatch
    ):
        """Test that the watch reads no more than a State request's size: a larger one ends the connection."""
        monkeypatch.setattr(_unix_server, "WATCH_READ_S", WAIT_S)
        async with serving(path, inline=True) as server:
            oversized = struct.pack(">I", _unix_server.STATE_REQUEST_MAX_BYTES + 1) + b"x" * 16
            client = ThreadDialler(connected(path), "State", oversized)
            with client.sock:
                client.start()
                server._answer_waiting()
                assert client.join() == b""

    async def test_answer_waiting_should_turn_away_a_dialler_of_an_untrusted_uid(self, path, caplog):
        """Test that the watch checks the dialler's uid before reading anything from it."""
        untrusted = Trust(TRUST.keyring, frozenset({os.getuid() + 1}))
        async with serving(path, inline=True, trust=untrusted) as server:
            with connected(path) as sock:
                server._answer_waiting()
                assert sock.recv(1) == b""  # closed at once, nothing read or sent
        assert "turned away a connection to the unix socket" in caplog.text

    async def test_answer_waiting_should_do_nothing_when_the_worker_is_not_inline(self, path):
        """Test that a worker whose routines have a loop of their own leaves every connection to its loop."""
        async with serving(path, inline=False) as server:
            with connected(path):
                server._answer_waiting()  # returns at once: nothing accepted here
            channel = UnixChannel(path, TRUST, UID)
            try:
                assert (await channel.state(WAIT_S)).uid == str(UID)
            finally:
                await channel.close()
