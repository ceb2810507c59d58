"""Tests for pool._dispatch._route: the pool, not the worker's record, decides how a worker is dialled."""

from __future__ import annotations

import uuid

import pytest

import pool
from pool._dispatch._route import Route, route


class Credentials:
    """Stands for `TlsCredentials` (route only passes them on)."""


CREDS = Credentials()


def worker(address: str, tls: bool) -> pool.WorkerMetadata:
    return pool.WorkerMetadata(uid=uuid.UUID(int=1), address=address, tls=tls)


@pytest.mark.parametrize(
    "address,tls,credentials,insecure,expected",
    [
        ("unix:/run/w.sock", False, CREDS, False, Route(None)),
        ("127.0.0.1:5000", False, CREDS, False, Route(None)),  # loopback: the handshake and the peer's uid guard it
        ("[::1]:5000", True, CREDS, False, Route(CREDS)),
        ("127.0.0.1:5000", True, None, False, "no credentials"),
        ("10.0.0.5:5000", True, CREDS, False, Route(CREDS)),
        ("10.0.0.5:5000", False, CREDS, False, "does not choose the transport"),  # a planted "tls": false
        ("10.0.0.5:5000", False, CREDS, True, "does not choose the transport"),  # even when insecure is allowed
        ("10.0.0.5:5000", False, None, False, "insecure=True"),
        ("10.0.0.5:5000", False, None, True, Route(None)),
        ("10.0.0.5:5000", True, None, True, "no credentials"),
    ],
)
def test_route_should_follow_the_pool_not_the_record(address, tls, credentials, insecure, expected):
    got = route(worker(address, tls), credentials, insecure=insecure)  # type: ignore[arg-type]
    if isinstance(expected, Route):
        assert got == expected
    else:
        assert isinstance(got, str) and expected in got
