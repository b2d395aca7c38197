"""A job's own certificate authority, made for each job that reaches AWS: the certificate the job's
gateway (emulator/run/job_gateway.py) shows for AWS's names, signed by a CA whose certificate the hosts
are given (AWS_CA_BUNDLE), so a host's TLS to "s3.amazonaws.com" ends at the gateway and is trusted."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CERTIFICATE_DAYS = 30


@dataclass(frozen=True)
class Authority:
    """A job's certificate authority (its certificate, PEM) and the gateway's certificate and key for
    AWS's names in `regions`, signed by it."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @classmethod
    def make(cls, regions: Iterable[str], extra_names: Iterable[str] = ()) -> Authority:
        now = dt.datetime.now(dt.timezone.utc)
        start, end = now - dt.timedelta(minutes=5), now + dt.timedelta(days=CERTIFICATE_DAYS)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hetero-emu job CA")])
        ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
              .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(start).not_valid_after(end)
              .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
              .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                           content_commitment=False, key_encipherment=False,
                                           data_encipherment=False, key_agreement=False,
                                           encipher_only=False, decipher_only=False), critical=True)
              .sign(ca_key, hashes.SHA256()))
        key = ec.generate_private_key(ec.SECP256R1())
        names = [x509.DNSName(n) for n in dict.fromkeys([*aws_names(regions), *extra_names])]
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "amazonaws.com")]))
                .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        return cls(ca.public_bytes(serialization.Encoding.PEM), cert.public_bytes(serialization.Encoding.PEM),
                   key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()))


def aws_names(regions: Iterable[str]) -> list[str]:
    """The names a certificate must hold for AWS's endpoints: a wildcard covers one label only, so
    each form of host the SDKs build has its own (https://docs.aws.amazon.com/general/latest/gr/rande.html;
    S3's virtual-hosted and dual-stack forms:
    https://docs.aws.amazon.com/AmazonS3/latest/userguide/VirtualHosting.html)."""
    names = ["amazonaws.com", "*.amazonaws.com", "*.s3.amazonaws.com"]
    for region in dict.fromkeys(regions):
        names += [f"*.{region}.amazonaws.com", f"*.s3.{region}.amazonaws.com", f"*.s3-{region}.amazonaws.com",
                  f"*.s3.dualstack.{region}.amazonaws.com", f"*.sagemaker.{region}.amazonaws.com"]
    return names
