"""Two-registry catalog helpers: a test PKI, pushed models, Secrets of a catalog source."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client

from devstack.services import OciRegistry
from servingops.api_models.deckhouse.model import ClusterModel
from servingops.clients.catalog_remote import (
    canonical_json,
)
from servingops.clients.oci import media_types as mt
from servingops.clients.oci.modelpack import LayerFile, ModelPackMeta, build_artifact, sha256_digest
from servingops.clients.oci.registry_client import ModelRegistry

REPOSITORY = "servingops/models"


@dataclass(frozen=True)
class Pki:
    ca_pem: str
    other_ca_pem: str
    cert_file: Path
    key_file: Path
    elsewhere_cert_file: Path
    """Signed by the same CA, for the name elsewhere.example only."""
    elsewhere_key_file: Path


@dataclass(frozen=True)
class Pushed:
    digest: str
    size: int
    blobs: dict[str, bytes]
    """Every blob (config and layers) by digest."""


def push_model(registry: OciRegistry, name: str, weights: bytes) -> Pushed:
    files = {"config.json": canonical_json({"model_type": "llama", "name": name}),
             "model.safetensors": weights, "README.md": f"# {name}\n".encode()}
    layers = [LayerFile(path=path, role=_role(path), sha256=sha256_digest(data), size=len(data))
              for path, data in files.items()]
    built = build_artifact(layers, ModelPackMeta(name=name, family="llama", format="safetensors"))
    blobs = {sha256_digest(data): data for data in files.values()}
    blobs[built.config_descriptor.digest] = built.config
    with ModelRegistry(registry.address, insecure=True) as client_a:
        for digest, data in blobs.items():
            client_a.put_blob_bytes(REPOSITORY, data, digest)
        digest = client_a.put_manifest(REPOSITORY, built.manifest_descriptor.digest, built.manifest, mt.OCI_MANIFEST)
    return Pushed(digest=digest, size=len(built.manifest) + sum(len(b) for b in blobs.values()), blobs=blobs)


def _role(path: str) -> mt.FileRole:
    return {"config.json": mt.FileRole.WEIGHT_CONFIG, "model.safetensors": mt.FileRole.WEIGHT}.get(
        path, mt.FileRole.DOC)


def catalog_cluster_model(name: str, pushed: Pushed, *, phase: str = "Ready", version: str | None = "rev-1",
                   ready: str = "True") -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "artifact": {"digest": pushed.digest, "kind": "OCI", "mediaType": mt.OCI_MANIFEST, "sizeBytes": pushed.size},
        "resolved": {"format": "Safetensors", "family": "llama", "parameterCount": 1000,
                     "supportedEndpointTypes": ["Chat"]},
        "conditions": [{"type": "Ready", "status": ready, "reason": "Published", "message": "published",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }
    if version:
        status["source"] = {"resolvedRevision": version}
    return {"apiVersion": ClusterModel.crd.api_version, "kind": "ClusterModel", "metadata": {"name": name},
            "spec": {"source": {"url": f"https://huggingface.co/org/{name}"}}, "status": status}


def catalog_secret(api: client.ApiClient, namespace: str, name: str, data: dict[str, str]) -> None:
    client.CoreV1Api(api).create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=name), string_data=data))


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _server_cert(directory: Path, stem: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
                 names: list[x509.GeneralName]) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name("catalog endpoint")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    cert_file, key_file = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_file.write_text(_pem(cert))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("catalog-pki")
    ca, ca_key = _ca("catalog test CA")
    other, _ = _ca("another CA")
    cert_file, key_file = _server_cert(directory, "tls", ca, ca_key, [
        x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    elsewhere_cert, elsewhere_key = _server_cert(directory, "elsewhere", ca, ca_key,
                                                 [x509.DNSName("elsewhere.example")])
    return Pki(ca_pem=_pem(ca), other_ca_pem=_pem(other), cert_file=cert_file, key_file=key_file,
               elsewhere_cert_file=elsewhere_cert, elsewhere_key_file=elsewhere_key)
