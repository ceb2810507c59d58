"""StoreDiscovery's I/O-free parts: registry rows -> worker records -> events."""

from __future__ import annotations

import uuid

import hypothesis.strategies as st
from hypothesis import given

from pool._discovery._local import record_to_json
from pool._discovery._registry import seal_record
from pool._discovery._store import admit_at_rate, diff, parse
from pool._transport._rpc import WorkerMetadata
from pool._transport._seal import Seal
from tests.sealing import SEAL

workers = st.builds(
    WorkerMetadata,
    uid=st.sampled_from([uuid.UUID(int=i) for i in range(6)]),
    address=st.sampled_from(["10.0.0.1:5000", "10.0.0.2:5000"]),
    capacity=st.integers(0, 4),
)
snapshots = st.lists(workers, max_size=6).map(lambda ws: {w.uid: w for w in ws})


@given(st.lists(snapshots, min_size=1, max_size=6))
def test_diff_events_should_replay_into_each_snapshot(sequence):
    known: dict[uuid.UUID, WorkerMetadata] = {}
    seen: dict[uuid.UUID, WorkerMetadata] = {}
    for current in sequence:
        for event in diff(known, current):
            if event.kind == "dropped":
                assert event.worker.uid in seen
                del seen[event.worker.uid]
            else:
                assert (event.kind == "added") == (event.worker.uid not in seen)
                seen[event.worker.uid] = event.worker
        assert seen == current == known


def test_parse_should_skip_a_row_that_is_not_a_record():
    worker = WorkerMetadata(
        uid=uuid.UUID(int=1), address="10.0.0.1:5000", tags=frozenset({"gpu"}), capacity=2, tls=True
    )
    rows = {
        str(worker.uid): seal_record(SEAL, str(worker.uid), record_to_json(worker)),
        "junk": seal_record(SEAL, "junk", "{not json"),
        "half": seal_record(SEAL, "half", '{"uid": "x"}'),
    }
    assert parse(rows, SEAL) == ({worker.uid: worker}, ["junk", "half"])


def test_parse_should_admit_only_records_sealed_for_their_uid_with_a_secret_held():
    """Test issue 51: a row written without the secret (plain JSON, a forged MAC, another uid's sealed record, a
    record under another secret) adds no member."""
    one, two = (WorkerMetadata(uid=uuid.UUID(int=i), address=f"10.0.0.{i}:5000", capacity=1) for i in (1, 2))
    other = Seal(lambda: ("another secret",), "another")
    rows = {
        str(one.uid): seal_record(SEAL, str(one.uid), record_to_json(one)),
        str(two.uid): record_to_json(two),  # unsealed
        str(uuid.UUID(int=3)): seal_record(SEAL, str(one.uid), record_to_json(one)),  # one's, under uid 3
        str(uuid.UUID(int=4)): seal_record(other, str(uuid.UUID(int=4)), record_to_json(two)),
        str(uuid.UUID(int=5)): "LPS1 " + "00" * 32 + " " + record_to_json(two),  # a forged MAC
    }
    found, skipped = parse(rows, SEAL)
    assert found == {one.uid: one}
    assert sorted(skipped) == sorted(uid for uid in rows if uid != str(one.uid))


def test_admit_at_rate_should_hold_back_new_members_past_the_rate_and_keep_known_ones():
    """Test the admission rate: known members stay whatever the rate; new ones beyond it wait, lowest uid first."""
    workers = {uuid.UUID(int=i): WorkerMetadata(uid=uuid.UUID(int=i), address=f"h:{i}") for i in range(10)}
    known = {uid: w for uid, w in workers.items() if uid.int < 3}
    found = dict(workers)
    tokens = iter([True] * 4 + [False] * 100)
    assert admit_at_rate(known, found, lambda: next(tokens)) == 3
    assert sorted(uid.int for uid in found) == list(range(7))
