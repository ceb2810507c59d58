"""Tests for pool._worker._door's decisions (`Gatekeeper`): caps per peer and in all, room kept for trusted uids.

The door itself (real sockets, a real second user) is tested in tests/integration/trust/test_door.py.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pool._worker._door import Caps, Gatekeeper, Peer

CAPS = Caps(connections=20, reserved=5, per_peer=6, unproven_per_peer=3, unproven=8)
PEERS = [Peer("uid 0", True), *(Peer(f"10.0.0.{i}", False) for i in range(5))]

steps = st.lists(
    st.tuples(st.sampled_from(["open", "prove", "close"]), st.integers(0, len(PEERS) - 1), st.integers(0, 99)),
    max_size=200,
)


class TestGatekeeper:
    @given(steps)
    def test_counts_should_stay_within_the_caps_and_match_what_is_open(self, script):
        """Test the invariants under any order of opens, proofs and closes: no cap is ever passed, untrusted
        peers never take the room kept for trusted ones, and the counts are those of the connections open."""
        gate = Gatekeeper(CAPS)
        open_: list[tuple[Peer, bool]] = []  # (peer, proven)
        for action, who, pick in script:
            peer = PEERS[who]
            if action == "open":
                if gate.admit(peer) is None:
                    open_.append((peer, False))
            elif open_:
                index = pick % len(open_)
                held, proven = open_[index]
                if action == "prove" and not proven:
                    gate.proven(held)
                    open_[index] = (held, True)
                elif action == "close":
                    gate.closed(held, proven)
                    del open_[index]
            untrusted = [(p, proven) for p, proven in open_ if not p.trusted]
            assert gate.total == len(open_) <= CAPS.connections
            assert len(untrusted) <= CAPS.connections - CAPS.reserved
            assert gate.total_unproven == sum(not proven for _, proven in untrusted) <= CAPS.unproven
            for p in PEERS[1:]:
                assert sum(q == p for q, _ in open_) <= CAPS.per_peer
                assert sum(q == p and not proven for q, proven in open_) <= CAPS.unproven_per_peer
        for held, proven in open_:
            gate.closed(held, proven)
        assert (gate.total, gate.total_unproven, gate.open, gate.unproven) == (0, 0, {}, {})

    def test_a_flood_of_untrusted_peers_should_leave_room_for_a_trusted_uid(self):
        """Test that however many untrusted connections come, the user's own pool still gets in."""
        gate = Gatekeeper(CAPS)
        admitted = sum(gate.admit(Peer(f"10.0.{i}.1", False)) is None for i in range(100))
        assert admitted == CAPS.unproven
        assert gate.admit(Peer("uid 0", True)) is None

    def test_unproven_connections_of_one_peer_should_be_capped_before_the_total(self):
        """Test that one address cannot take every unproven place: a second address still gets in."""
        gate = Gatekeeper(CAPS)
        one, two = Peer("10.0.0.1", False), Peer("10.0.0.2", False)
        assert [gate.admit(one) for _ in range(CAPS.unproven_per_peer)] == [None] * CAPS.unproven_per_peer
        assert "have not proven themselves yet" in (gate.admit(one) or "")
        assert gate.admit(two) is None
        gate.proven(one)  # one of its connections proved itself: room for another unproven one
        assert gate.admit(one) is None

    def test_caps_from_the_limit_should_leave_headroom(self):
        """Test that the caps keep descriptors for the worker itself (three per relayed connection)."""
        caps = Caps.from_limit()
        assert caps.connections >= 8 and caps.reserved <= caps.connections // 4 + 1
