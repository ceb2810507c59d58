"""StoreDiscovery's I/O-free parts: registry rows -> worker records -> events."""

from __future__ import annotations

import uuid

import hypothesis.strategies as st
from hypothesis import given

from pool._discovery._local import record_to_json
from pool._discovery._store import diff, parse
from pool._transport._rpc import WorkerMetadata

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
    rows = {str(worker.uid): record_to_json(worker), "junk": "{not json", "half": '{"uid": "x"}'}
    assert parse(rows) == {worker.uid: worker}
