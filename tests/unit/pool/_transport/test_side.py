"""Tests for pool._transport._side: region descriptors lent and released over a real unix socket pair, and the inbox."""

from __future__ import annotations

import collections
import gc
import os
import socket
from collections.abc import Iterator

import pytest

from pool._transport import _side
from pool._transport._side import SideChannel


class Region:
    """A `Lendable` backed by a real memfd, counting its holders."""

    def __init__(self, token: int, data: bytes) -> None:
        self.token = token
        self.size = len(data)
        self.fd = os.memfd_create(f"region-{token}")
        os.write(self.fd, data)
        self.holders = 0
        self.taken = 0

    def take(self) -> None:
        self.holders += 1
        self.taken += 1

    def give_back(self) -> None:
        self.holders -= 1


class Holder:
    """A `Holder` that records the tokens it was told were let go."""

    def __init__(self) -> None:
        self.released: list[int] = []

    def release(self, token: int) -> None:
        self.released.append(token)


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch) -> Iterator[None]:
    """Each test gets its own process-wide inbox and channel table (the module keeps one per process)."""
    inbox: collections.OrderedDict[int, tuple[int, object]] = collections.OrderedDict()
    monkeypatch.setattr(_side, "_inbox", inbox)
    monkeypatch.setattr(_side, "_channels", {})
    monkeypatch.setattr(_side, "_expected", False)
    yield
    for fd, _ in inbox.values():
        os.close(fd)


@pytest.fixture
def pair() -> Iterator[tuple[SideChannel, SideChannel]]:
    """Two side channels joined by a unix socket pair: a lender and a borrower."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    lender, borrower = SideChannel(a), SideChannel(b)
    yield lender, borrower
    lender.close()
    borrower.close()


@pytest.fixture
def regions() -> Iterator[list[Region]]:
    made: list[Region] = []
    yield made
    for region in made:
        os.close(region.fd)


def region(regions: list[Region], token: int, data: bytes = b"payload") -> Region:
    made = Region(token, data)
    regions.append(made)
    return made


class TestSideChannel:
    def test_lend_should_put_the_region_in_the_borrowers_inbox_when_drained(self, pair, regions):
        """Test that a lent descriptor arrives, maps the same memory, and is taken once with its holder."""
        lender, borrower = pair
        lent = region(regions, 7, b"large value bytes")
        assert lender.lend(lent) is True
        assert lent.holders == 1
        borrower.drain()
        fd, holder = _side.take(7)
        try:
            assert holder is borrower
            assert os.pread(fd, lent.size, 0) == b"large value bytes"
        finally:
            os.close(fd)
        with pytest.raises(LookupError):
            _side.take(7)

    def test_release_should_give_the_region_back_when_the_lender_drains_it(self, pair, regions):
        """Test that the borrower's release reaches the lender and gives back exactly that lending."""
        lender, borrower = pair
        first, second = region(regions, 1), region(regions, 2)
        lender.lend(first)
        lender.lend(second)
        borrower.release(2)
        lender.drain()
        assert (first.holders, second.holders) == (1, 0)

    def test_release_should_count_each_lending_when_one_region_is_lent_twice(self, pair, regions):
        """Test that a region lent twice needs two releases before it is free again."""
        lender, borrower = pair
        lent = region(regions, 5)
        lender.lend(lent)
        lender.lend(lent)
        borrower.release(5)
        lender.drain()
        assert lent.holders == 1
        borrower.release(5)
        borrower.release(5)  # one more than was lent: ignored
        lender.drain()
        assert lent.holders == 0 and lent.taken == 2

    def test_lend_should_return_false_and_give_back_when_the_channel_is_closed(self, pair, regions):
        """Test that a closed connection refuses a lending (the value then goes inline) and leaves no holder."""
        lender, _ = pair
        lender.close()
        lent = region(regions, 3)
        assert lender.lend(lent) is False
        assert lent.holders == 0 and lent.taken == 1

    def test_close_should_give_back_everything_still_lent_when_the_peer_is_replaced(self, pair, regions):
        """Test that closing counts every region lent and not released as released."""
        lender, _ = pair
        one, two = region(regions, 1), region(regions, 2)
        lender.lend(one)
        lender.lend(one)
        lender.lend(two)
        lender.close()
        lender.close()
        assert (one.holders, two.holders) == (0, 0) and lender.closed

    def test_drain_should_close_and_give_back_when_the_peer_hung_up(self, pair, regions):
        """Test that the end of the stream closes the channel and frees what was lent over it."""
        lender, borrower = pair
        lent = region(regions, 9)
        lender.lend(lent)
        borrower.sock.close()
        lender.drain()
        assert lender.closed and lent.holders == 0
        assert lender.lend(lent) is False

    def test_drain_should_close_a_descriptor_when_its_record_is_cut_short(self, pair, regions):
        """Test that a descriptor arriving with less than a whole record is closed, not kept."""
        lender, borrower = pair
        lent = region(regions, 4)
        gc.collect()
        gc.disable()  # (an earlier test's socket collected meanwhile would close a descriptor of its own)
        try:
            before = len(os.listdir("/proc/self/fd"))
            socket.send_fds(lender.sock, [b"12345678"], [lent.fd])
            lender.sock.shutdown(socket.SHUT_WR)
            borrower.drain()
            assert not _side._inbox and borrower.closed
            assert len(os.listdir("/proc/self/fd")) == before - 1  # the borrower's socket closed, nothing received kept
        finally:
            gc.enable()


class TestRegistry:
    def test_register_should_close_the_old_channel_when_a_peer_gets_a_new_one(self, pair):
        """Test that one peer has one live side channel: registering another closes the first."""
        old, new = pair
        _side.register(42, old)
        assert _side.channel(42) is old
        _side.register(42, new)
        assert old.closed and _side.channel(42) is new

    def test_channel_should_be_none_when_the_registered_one_closed(self, pair):
        """Test that a closed channel is neither returned nor kept in the table."""
        side, _ = pair
        _side.register("peer", side)
        side.close()
        assert _side.channel("peer") is None and _side.channel("other") is None
        assert _side._channels == {}

    def test_wanted_should_be_true_only_when_a_peer_can_take_buffers_out_of_band(self, pair):
        """Test that payloads go out of band once a channel is up or a stream expects chunks, not before."""
        assert _side.wanted() is False
        _side.register(1, pair[0])
        assert _side.wanted() is True
        pair[0].close()
        assert _side.wanted() is False
        _side.expect()
        assert _side.wanted() is True

    def test_peer_pid_should_be_this_process_when_both_ends_are_here(self):
        """Test that SO_PEERCRED names the process at the other end (here, this one)."""
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with a, b:
            assert _side.peer_pid(a.fileno()) == os.getpid()
            a.send(b"x")  # the socket itself is still usable (only a duplicate was closed)
            assert b.recv(1) == b"x"


class TestInbox:
    def test_take_should_drain_every_channel_when_the_token_is_not_in_the_inbox_yet(self, pair, regions):
        """Test that take reads what arrived on the side connections before it gives up."""
        lender, borrower = pair
        _side.register("lender", lender)
        _side.register("borrower", borrower)
        lender.lend(region(regions, 11))
        fd, holder = _side.take(11)
        os.close(fd)
        assert holder is borrower

    def test_take_should_raise_lookup_error_when_the_buffers_never_arrived(self):
        """Test that a frame naming a region that did not come fails clearly."""
        with pytest.raises(LookupError, match="did not arrive"):
            _side.take(1234)

    def test_keep_should_let_go_of_the_oldest_when_the_inbox_is_full(self, monkeypatch):
        """Test that the inbox holds INBOX_MAX descriptors at most: the oldest is closed and released to its holder."""
        monkeypatch.setattr(_side, "INBOX_MAX", 3)
        holder = Holder()
        fds = [os.memfd_create(f"r{i}") for i in range(5)]
        for token, fd in enumerate(fds):
            _side.keep(token, fd, holder)
        assert list(_side._inbox) == [2, 3, 4]
        assert holder.released == [0, 1]
        for fd in fds[:2]:
            with pytest.raises(OSError):
                os.fstat(fd)

    def test_keep_should_let_go_of_the_earlier_descriptor_when_a_token_arrives_twice(self):
        """Test that a token arriving again replaces the earlier descriptor, which is closed and released."""
        holder = Holder()
        first, second = os.memfd_create("a"), os.memfd_create("b")
        _side.keep(8, first, holder)
        _side.keep(8, second, holder)
        assert holder.released == [8]
        with pytest.raises(OSError):
            os.fstat(first)
        assert _side.take(8) == (second, holder)
        os.close(second)
