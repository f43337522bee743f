"""Serving certificates for the local stack's loopback HTTPS servers (the model webhook) and for Traefik's
default TLS store: a CA of its own and a certificate for 127.0.0.1 and localhost signed by it, ECDSA P-256
(made in milliseconds, unlike the RSA-2048 key Traefik generates for itself on every reload without one)."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class ServingCert:
    ca_pem: bytes
    cert_file: Path
    key_file: Path

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode()

    def client_context(self) -> ssl.SSLContext:
        """What a client that trusts only this CA uses (the readiness probe)."""
        return ssl.create_default_context(cadata=self.ca_pem.decode())


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Certificate | None,
                 issuer_key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (x509.CertificateBuilder().subject_name(name)
               .issuer_name(issuer.subject if issuer else name).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=365))
               .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True))
    if issuer is not None:
        builder = (builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                               x509.DNSName("localhost")]), critical=False))
    return builder.sign(issuer_key, hashes.SHA256())


def write_serving_cert(directory: Path, subject: str = "servingops-webhook") -> ServingCert:
    """A CA and a serving certificate for 127.0.0.1 signed by it (ECDSA P-256), the key readable by us only."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate(f"{subject}-local-ca", ca_key, None, ca_key)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate(subject, key, ca, ca_key)
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    return ServingCert(ca.public_bytes(serialization.Encoding.PEM), cert_file, key_file)
