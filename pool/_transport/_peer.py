"""Who is at the other end of a connection on this host: the peer's uid (issue 43).

The handshake (`_handshake`) proves the other end holds the secret; a
relay run by another local user that merely passes the bytes on would get
through it and then read (and change) every frame. On this host the kernel
knows better: a unix socket tells its peer's credentials (``SO_PEERCRED``),
and for loopback TCP ``/proc/net/tcp`` and ``tcp6`` list every socket
with the uid that owns it. Each end checks that the other is a user it
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

PROC_NET: Final[tuple[str, ...]] = ("/proc/net/tcp", "/proc/net/tcp6")
"""The kernel's tables of this network namespace's TCP sockets, with their owners' uids."""

_LISTEN: Final[str] = "0A"
"""TCP_LISTEN in those tables."""


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
    """Raise unless every socket at loopback ``host:port`` (listening, or accepted there) is a trusted uid's.

    What a pool checks of the worker it dialled on loopback: a relay of
    another user's listening there owns its sockets.

    Raises:
        Refused: a socket there belongs to another uid, or none is there.
    """
    owners = {uid for uid, _ in _sockets(host, port, wildcard=True)}
    _judge(owners, trusted, what)


def check_tcp_peer(host: str, port: int, trusted: Collection[int], what: str) -> None:
    """Raise unless the socket at ``host:port`` (a peer's end of a loopback connection) is a trusted uid's.

    Raises:
        Refused: it belongs to another uid, or it is not there.
    """
    owners = {uid for uid, state in _sockets(host, port, wildcard=False) if state != _LISTEN}
    _judge(owners, trusted, what)


def _judge(owners: set[int], trusted: Collection[int], what: str) -> None:
    if not owners:
        raise Refused(f"cannot tell who {what} is: no such socket in {' or '.join(PROC_NET)}")
    strangers = sorted(owners - set(trusted))
    if strangers:
        raise Refused(f"{what} is a socket of uid {strangers[0]}, which this process does not trust (peer_uids)")


def _sockets(host: str, port: int, *, wildcard: bool) -> Iterator[tuple[int, str]]:
    """(uid, state) of each TCP socket whose local address is ``host:port`` (or the wildcard with that port)."""
    want = _packed(host)
    for path in PROC_NET:
        try:
            with open(path) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 8:
                continue
            address, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) != port:
                continue
            local = _unhex(address)
            if local == want or (wildcard and local in _ANY):
                yield int(fields[7]), fields[3]


def _packed(host: str) -> bytes:
    """``host`` as 16 bytes (IPv4 as IPv4-mapped IPv6), the form `_unhex` returns."""
    address = ipaddress.ip_address(host.strip("[]"))
    if isinstance(address, ipaddress.IPv4Address):
        return ipaddress.IPv6Address("::ffff:" + str(address)).packed
    return address.packed


def _unhex(text: str) -> bytes:
    """An address as ``/proc/net/tcp*`` prints it (32-bit words in host order) as 16 bytes, IPv4 mapped."""
    raw = bytes.fromhex(text)
    words = b"".join(raw[i : i + 4][::-1] if _LITTLE else raw[i : i + 4] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return b"\0" * 10 + b"\xff\xff" + words
    return words


_LITTLE: Final[bool] = struct.pack("=I", 1) == struct.pack("<I", 1)

_ANY: Final[frozenset[bytes]] = frozenset({bytes(16), b"\0" * 10 + b"\xff\xff" + bytes(4)})
"""The wildcard addresses (``::`` and ``0.0.0.0``), as `_unhex` returns them."""
