#!/usr/bin/env python3
"""Make a CA and certificates for a small leakypool cluster (mutual TLS).

    python tools/make_certs.py --out certs --worker-ip 192.168.1.20 --worker-ip 192.168.1.21

writes, into ``certs/``:

- ``ca.pem`` / ``ca-key.pem``: the cluster CA (keep the key offline);
- ``worker-IP.pem`` / ``worker-IP-key.pem`` for each ``--worker-ip``: that
  worker's own certificate, naming its address and nothing else (issue 43);
- ``worker.pem`` / ``worker-key.pem``: one certificate all workers may
  present, for the DNS name ``leakypool-worker`` (what pools verify by
  default; see ``pool.TlsCredentials.server_name``) and every ``--worker-ip``;
- ``client.pem`` / ``client-key.pem``: what a dispatching process presents.

Workers: ``--tls-cert worker-IP.pem --tls-key worker-IP-key.pem --tls-client-ca ca.pem``.
Pools: ``pool.TlsCredentials(ca="ca.pem", cert="client.pem", key="client-key.pem", server_name=None)``:
each worker is then checked against the address the pool dials, so one
worker's certificate (a host that was broken into) cannot stand in for
another's. With the shared ``worker.pem`` and the default ``server_name``,
any worker's certificate passes for any other (TLS then says "a host of the
cluster", and only the handshake's secret says more).

Needs the ``cryptography`` package. Keys are EC P-256; certificates last
``--days`` (default 365). The same can be done with openssl (docs/lan-security.md).
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

WORKER_NAME = "leakypool-worker"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: pathlib.Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_certs(out: str | os.PathLike[str], worker_ips: list[str] = [], days: int = 365) -> dict[str, str]:  # noqa: B006
    """Write the CA, worker and client files into ``out``; their paths by role."""
    directory = pathlib.Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    ca_key = _key()
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("leakypool cluster CA"))
        .issuer_name(_name("leakypool cluster CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(common: str, usage: x509.ObjectIdentifier, san: list[x509.GeneralName]) -> tuple[bytes, bytes]:
        key = _key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    worker_san: list[x509.GeneralName] = [x509.DNSName(WORKER_NAME)]
    worker_san += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in worker_ips]
    worker_pem, worker_key = leaf(WORKER_NAME, ExtendedKeyUsageOID.SERVER_AUTH, worker_san)
    client_pem, client_key = leaf("leakypool-client", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    own = {
        ip: leaf(f"{WORKER_NAME} {ip}", ExtendedKeyUsageOID.SERVER_AUTH, [x509.IPAddress(ipaddress.ip_address(ip))])
        for ip in worker_ips
    }

    paths = {
        "ca": directory / "ca.pem",
        "ca_key": directory / "ca-key.pem",
        "worker": directory / "worker.pem",
        "worker_key": directory / "worker-key.pem",
        "client": directory / "client.pem",
        "client_key": directory / "client-key.pem",
    }
    _write(paths["ca"], ca.public_bytes(serialization.Encoding.PEM))
    _write(paths["ca_key"], _pem_key(ca_key), private=True)
    _write(paths["worker"], worker_pem)
    _write(paths["worker_key"], worker_key, private=True)
    _write(paths["client"], client_pem)
    _write(paths["client_key"], client_key, private=True)
    for ip, (pem, key) in own.items():
        paths[f"worker {ip}"] = directory / f"worker-{ip}.pem"
        paths[f"worker {ip} key"] = directory / f"worker-{ip}-key.pem"
        _write(paths[f"worker {ip}"], pem)
        _write(paths[f"worker {ip} key"], key, private=True)
    return {role: str(path) for role, path in paths.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="certs", help="directory to write into (default certs/)")
    parser.add_argument("--worker-ip", action="append", default=[], help="an IP the workers serve on (repeatable)")
    parser.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    args = parser.parse_args()
    for role, path in make_certs(args.out, args.worker_ip, args.days).items():
        print(f"{role:10} {path}")
