"""Who is at the other end of a connection on this host: the peer's uid (issue 43).

The handshake (`_handshake`) proves the other end holds the secret; a
relay run by another local user that merely passes the bytes on would get
through it and then read (and change) every frame. On this host the kernel
knows better: a unix socket tells its peer's credentials (``SO_PEERCRED``),
and for loopback TCP the kernel's ``sock_diag`` netlink interface names the
uid owning one socket, found by its four-tuple (`tcp_owner`). Each end checks that the other is a user it
trusts (by default, its own user only: also for root). Off the host, TLS
does this job.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Collection, Iterator
from typing import Final

from ._handshake import Refused

_UCRED: Final[struct.Struct] = struct.Struct("3i")  # pid, uid, gid


def trusted_uids(extra: Collection[int] = ()) -> frozenset[int]:
    """The uids this process lets in or dials: its own, plus ``extra`` (``peer_uids``)."""
    return frozenset({os.getuid(), *extra})


def unix_peer(sock: socket.socket) -> tuple[int, int]:
    """The pid and uid of the process at the other end of unix socket ``sock``."""
    pid, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return pid, uid


def check_unix(sock: socket.socket | None, trusted: Collection[int], what: str) -> None:
    """Raise unless the peer of unix socket ``sock`` runs as a trusted uid.

    Raises:
        Refused: it does not (or the socket is gone).
    """
    try:
        _, uid = unix_peer(sock) if sock is not None else (0, -1)
    except OSError as exc:
        raise Refused(f"cannot tell who {what} is: {exc}") from None
    if uid not in trusted:
        raise Refused(f"{what} runs as uid {uid}, which this process does not trust (peer_uids)")


def loopback_host(host: str) -> str | None:
    """``host`` as an IP address if it is a loopback one (``localhost`` too), else None."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    return str(address) if address.is_loopback else None


def check_tcp_listener(host: str, port: int, trusted: Collection[int], what: str) -> None:
    """Raise unless the socket listening at loopback ``host:port`` (the one a connection there reaches) is a
    trusted uid's.

    What a pool checks of the worker it dials on loopback, before it sends anything: a relay of another
    user's listening there owns its socket. One exact lookup in the kernel (`tcp_owner`), no table scan.

    Raises:
        Refused: it belongs to another uid.
        ConnectionRefusedError: nothing listens there (the worker is not there, for now: transient).
    """
    uid = tcp_owner((host, port), (host, 0), listening=True)  # (any remote end finds the listener)
    if uid is None:
        raise ConnectionRefusedError(f"nothing listens at {host}:{port} ({what})")
    _judge(uid, trusted, what)


def check_tcp_peer(
    peer: tuple[str, int], local: Collection[tuple[str, int]], trusted: Collection[int], what: str
) -> None:
    """Raise unless the peer's end of a loopback connection from ``peer`` to one of ``local`` is a trusted uid's.

    The connection is found by its four-tuple (the peer's address and port, this end's address and port),
    never by the peer's port alone: Linux reuses a local port for connections to different destinations, so
    another user's socket may share the caller's port. ``local`` lists the addresses this end may have been
    reached at (its bound address; for a wildcard one, the loopback addresses a caller would use).

    Raises:
        Refused: it belongs to another uid, or no such connection is there.
    """
    for address in local:
        uid = tcp_owner(peer, address, listening=False)
        if uid is not None:
            return _judge(uid, trusted, what)
    _judge(None, trusted, what)


def _judge(uid: int | None, trusted: Collection[int], what: str) -> None:
    if uid is None:
        raise Refused(f"cannot tell who {what} is: the kernel knows no such socket")
    if uid not in trusted:
        raise Refused(f"{what} is a socket of uid {uid}, which this process does not trust (peer_uids)")


# -- the kernel's socket table, one socket at a time (NETLINK_SOCK_DIAG) --------------------------------------
#
# ``sock_diag`` (linux/inet_diag.h) answers a request naming one TCP socket by its four-tuple with that socket
# alone: the kernel runs the same lookup an arriving packet would (an established socket, else the listener),
# so no table is read and the answer costs microseconds, not a parse of /proc/net/tcp (issue 51: 260 ms with
# 20,000 sockets, on the worker's loop).

_NETLINK_SOCK_DIAG: Final[int] = 4
_SOCK_DIAG_BY_FAMILY: Final[int] = 20
_NLM_F_REQUEST: Final[int] = 1
_NLMSG_ERROR: Final[int] = 2
_NLMSG: Final[struct.Struct] = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_REQUEST: Final[struct.Struct] = struct.Struct("=BBBBI")  # family, protocol, extensions, pad, states
_SOCKID: Final[struct.Struct] = struct.Struct("!HH16s16s")  # ports and addresses in network order
_SOCKID_TAIL: Final[struct.Struct] = struct.Struct("=III")  # interface, cookie (two words)
_REPLY: Final[struct.Struct] = struct.Struct("=BBBB")  # family, state, timer, retransmits
_REPLY_TAIL: Final[struct.Struct] = struct.Struct("=IIIII")  # expires, rqueue, wqueue, uid, inode
_NO_COOKIE: Final[int] = 0xFFFFFFFF
_TCP_LISTEN: Final[int] = 10
_ALL_STATES: Final[int] = 0xFFFFFFFF
_TIMEOUT_S: Final[float] = 1.0
"""How long the kernel's answer is waited for (it answers at once; this only bounds a broken netlink)."""


def tcp_owner(local: tuple[str, int], remote: tuple[str, int], *, listening: bool) -> int | None:
    """The uid owning the TCP socket whose own end is ``local`` and whose other end is ``remote``; None if none.

    Args:
        local: That socket's address and port.
        remote: The other end's (for a listener: any address, port 0).
        listening: Look for the listener at ``local`` (else an established socket, never a listener).
    """
    for family, src, dst in _forms(local[0], remote[0]):
        request = (
            _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, _ALL_STATES)
            + _SOCKID.pack(local[1], remote[1], src, dst)
            + _SOCKID_TAIL.pack(0, _NO_COOKIE, _NO_COOKIE)
        )
        reply = _ask(_NLMSG.pack(_NLMSG.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0) + request)
        if reply is None:
            continue
        state, sport, dport, got_src, got_dst, uid = reply
        if (state == _TCP_LISTEN) != listening:
            continue
        if not listening and (sport, dport, got_src, got_dst) != (local[1], remote[1], src, dst):
            continue  # (the kernel answered with another socket than the one asked for)
        return uid
    return None


def _forms(local: str, remote: str) -> Iterator[tuple[int, bytes, bytes]]:
    """(family, local, remote) as sock_diag wants them: IPv4 as IPv4, and IPv4 as IPv6-mapped (a dual-stack socket)."""
    a, b = ipaddress.ip_address(local.strip("[]")), ipaddress.ip_address(remote.strip("[]"))
    if isinstance(a, ipaddress.IPv4Address) and isinstance(b, ipaddress.IPv4Address):
        yield socket.AF_INET, a.packed + bytes(12), b.packed + bytes(12)
        a, b = ipaddress.IPv6Address("::ffff:" + str(a)), ipaddress.IPv6Address("::ffff:" + str(b))
    if isinstance(a, ipaddress.IPv6Address) and isinstance(b, ipaddress.IPv6Address):
        yield socket.AF_INET6, a.packed, b.packed


def _ask(message: bytes) -> tuple[int, int, int, bytes, bytes, int] | None:
    """Send one sock_diag request; the socket it names (state, ports, addresses, uid), or None."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(_TIMEOUT_S)
        nl.send(message)
        data = nl.recv(65536)
    if len(data) < _NLMSG.size:
        return None
    _, kind, _, _, _ = _NLMSG.unpack_from(data)
    if kind == _NLMSG_ERROR:
        return None  # ENOENT: no such socket
    at = _NLMSG.size
    _, state, _, _ = _REPLY.unpack_from(data, at)
    at += _REPLY.size
    sport, dport, src, dst = _SOCKID.unpack_from(data, at)
    at += _SOCKID.size + _SOCKID_TAIL.size
    _, _, _, uid, _ = _REPLY_TAIL.unpack_from(data, at)
    return state, sport, dport, src, dst, uid
