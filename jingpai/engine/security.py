"""A secured local OpenSearch node: the security plugin with TLS, an admin user, and the users, roles and role
mappings a test or a benchmark asks for.

``jingpai engine up --kind opensearch --plugins security`` installs ``org.opensearch.plugin:opensearch-security``
(fetched like the k-NN plugin, :mod:`jingpai.engine.plugins`) and, in the node's instance directory:

- :func:`ensure_tls` makes a certificate authority and, signed by it, the node's certificate (for ``127.0.0.1``
  and ``localhost``) and an admin client certificate, once per instance directory, with the ``cryptography``
  package (nothing downloaded; no demo certificates, which the plugin refuses in production mode anyway);
- :func:`write_security_config` writes the plugin's settings (TLS on HTTP and transport, the admin and node
  DNs, the REST API open to ``all_access``) and its configuration files: HTTP basic authentication against
  the internal users only (no anonymous access), one internal user ``admin`` (password in
  :func:`admin_password_file`, made once, readable by the caller only) mapped to ``all_access``; the plugin
  loads them into its index on first start (``allow_default_init_securityindex``);
- :class:`SecurityAdmin` creates and deletes internal users, roles and role mappings through the plugin's REST
  API (``/_plugins/_security/api``) as that admin, for the tests and ``bench/attack.py``.

Maven Central serves the plugin for some 2.19 releases only (not for 2.19.6, the harness's default): a node
with ``--plugins security`` and no ``--version`` runs :data:`~jingpai.engine.settings.SECURITY_DEFAULT_VERSION`.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import secrets
import shutil
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from jingpai.engine.settings import EngineError

logger = logging.getLogger(__name__)

ADMIN_USER = "admin"
#: the subjects of the certificates made here (RFC 4514, as the plugin compares them)
NODE_DN = "CN=jingpai-node,O=jingpai"
ADMIN_DN = "CN=jingpai-admin,O=jingpai"
CA_FILE = "root-ca.pem"
TLS_FILES = ("root-ca.pem", "node.pem", "node-key.pem", "admin.pem", "admin-key.pem")


def tls_dir(inst: Path) -> Path:
    """Where an instance's certificates and keys live (kept across restarts; copied into its config)."""
    return inst / "tls"


def ca_file(inst: Path) -> Path:
    """The CA certificate (PEM) that signed the node's certificate: what clients pass as ``--engine-ca-file``."""
    return tls_dir(inst) / CA_FILE


def admin_password_file(inst: Path) -> Path:
    """The file holding the admin user's password (mode 0600, made once per instance directory)."""
    return inst / "admin-password"


def admin_password(inst: Path) -> str:
    """The admin user's password of the node whose instance directory is ``inst``.

    Raises:
        EngineError: the node was not started with ``--plugins security`` (no password file).
    """
    try:
        return admin_password_file(inst).read_text().strip()
    except FileNotFoundError as exc:
        raise EngineError(f"{inst} has no admin password file: the node was not started with --plugins security") from exc


def _ensure_admin_password(inst: Path) -> str:
    path = admin_password_file(inst)
    if not path.exists():
        inst.mkdir(parents=True, exist_ok=True)
        # the plugin's REST API refuses weak passwords; 24 random URL-safe characters are strong
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(18) + "\n")
    return admin_password(inst)


def _certificate(subject, public, issuer, signer, *, ca: bool, usage: list | None = None, san: list | None = None):  # noqa: ANN001, ANN202
    """One X.509 certificate (10 years), signed by ``signer``: a CA's, or a leaf's with ``usage`` and ``san``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public)
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=3650))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=not ca, data_encipherment=False,
                                      key_agreement=False, key_cert_sign=ca, crl_sign=ca, encipher_only=False, decipher_only=False),
                        critical=True))
    if not ca:
        b = b.add_extension(x509.ExtendedKeyUsage(usage or []), critical=False)
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return b.sign(signer, hashes.SHA256())


def ensure_tls(inst: Path) -> Path:
    """The CA, node and admin certificates of ``inst`` (made once; kept so clients' CA files stay valid)."""
    folder = tls_dir(inst)
    if all((folder / name).exists() for name in TLS_FILES):
        return folder
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "jingpai"), x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key, node_key, admin_key = (rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(3))
    ca_name = name("jingpai-local-ca")
    ca_cert = _certificate(ca_name, ca_key.public_key(), ca_name, ca_key, ca=True)
    node_cert = _certificate(name("jingpai-node"), node_key.public_key(), ca_name, ca_key, ca=False,
                             usage=[ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
                             san=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    admin_cert = _certificate(name("jingpai-admin"), admin_key.public_key(), ca_name, ca_key, ca=False,
                              usage=[ExtendedKeyUsageOID.CLIENT_AUTH])
    pem = serialization.Encoding.PEM
    # the plugin reads PKCS#8 keys only
    pkcs8 = dict(encoding=pem, format=serialization.PrivateFormat.PKCS8, encryption_algorithm=serialization.NoEncryption())
    staging = folder.with_name(folder.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "root-ca.pem").write_bytes(ca_cert.public_bytes(pem))
    (staging / "node.pem").write_bytes(node_cert.public_bytes(pem))
    (staging / "node-key.pem").write_bytes(node_key.private_bytes(**pkcs8))
    (staging / "admin.pem").write_bytes(admin_cert.public_bytes(pem))
    (staging / "admin-key.pem").write_bytes(admin_key.private_bytes(**pkcs8))
    for private in ("node-key.pem", "admin-key.pem"):
        (staging / private).chmod(0o600)
    if folder.exists():
        shutil.rmtree(folder)
    staging.rename(folder)
    logger.info("made a CA and node and admin certificates for 127.0.0.1 in %s", folder)
    return folder


def node_settings() -> list[str]:
    """The security plugin's lines of ``opensearch.yml`` (the certificates are copied next to it)."""
    return [
        "plugins.security.ssl.transport.pemcert_filepath: node.pem",
        "plugins.security.ssl.transport.pemkey_filepath: node-key.pem",
        "plugins.security.ssl.transport.pemtrustedcas_filepath: root-ca.pem",
        "plugins.security.ssl.transport.enforce_hostname_verification: false",
        "plugins.security.ssl.http.enabled: true",
        "plugins.security.ssl.http.pemcert_filepath: node.pem",
        "plugins.security.ssl.http.pemkey_filepath: node-key.pem",
        "plugins.security.ssl.http.pemtrustedcas_filepath: root-ca.pem",
        "plugins.security.allow_default_init_securityindex: true",
        f"plugins.security.authcz.admin_dn: ['{ADMIN_DN}']",
        f"plugins.security.nodes_dn: ['{NODE_DN}']",
        "plugins.security.restapi.roles_enabled: ['all_access', 'security_rest_api_access']",
        "plugins.security.system_indices.enabled: true",
        "plugins.security.system_indices.indices: ['.opendistro-reports-*', '.plugins-ml-config', '.plugins-ml-model', '.plugins-ml-task']",
    ]


#: HTTP basic authentication against the internal users, nothing else; no anonymous access
_CONFIG_YML = """_meta: {type: config, config_version: 2}
config:
  dynamic:
    http:
      anonymous_auth_enabled: false
    authc:
      basic_internal_auth_domain:
        description: "HTTP basic authentication against the internal users"
        http_enabled: true
        transport_enabled: true
        order: 0
        http_authenticator: {type: basic, challenge: true}
        authentication_backend: {type: intern}
"""
_ROLES_MAPPING_YML = """_meta: {type: rolesmapping, config_version: 2}
all_access:
  reserved: false
  backend_roles: [admin]
  description: "the harness's admin user"
security_rest_api_access:
  reserved: false
  backend_roles: [admin]
"""


def write_security_config(conf: Path, inst: Path) -> None:
    """Into the node's config folder ``conf``: the certificates of ``inst`` and the plugin's configuration
    (authentication, the admin user, role mappings; the plugin's own ``roles.yml`` and the rest are kept)."""
    import bcrypt

    folder = ensure_tls(inst)
    for name in ("root-ca.pem", "node.pem", "node-key.pem"):
        (conf / name).write_bytes((folder / name).read_bytes())
    sec = conf / "opensearch-security"
    if not sec.is_dir():
        raise EngineError(f"{sec} is missing: the security plugin's configuration was not installed with it")
    password = _ensure_admin_password(inst)
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
    (sec / "config.yml").write_text(_CONFIG_YML)
    (sec / "internal_users.yml").write_text(
        "_meta: {type: internalusers, config_version: 2}\n"
        f"{ADMIN_USER}:\n  hash: \"{hashed}\"\n  reserved: true\n  backend_roles: [admin]\n  description: \"the harness's admin user\"\n"
    )
    (sec / "roles_mapping.yml").write_text(_ROLES_MAPPING_YML)


def ssl_context(ca: Path | str) -> ssl.SSLContext:
    """A client TLS context trusting ``ca`` only (hostnames checked: the node's certificate names 127.0.0.1)."""
    return ssl.create_default_context(cafile=str(ca))


@dataclass(frozen=True)
class SecurityAdmin:
    """The security plugin's REST API as the harness's admin user (``/_plugins/_security/api``).

    Args:
        url: the node (``https://127.0.0.1:<port>``).
        ca_file: the CA of its certificate (:func:`ca_file`).
        password: the admin's password (:func:`admin_password`).
    """

    url: str
    ca_file: Path
    password: str = field(repr=False)
    user: str = ADMIN_USER

    @classmethod
    def of(cls, url: str, inst: Path) -> SecurityAdmin:
        """The admin of the harness node whose instance directory is ``inst``."""
        return cls(url=url.rstrip("/"), ca_file=ca_file(inst), password=admin_password(inst))

    def _call(self, method: str, path: str, body: Any = None) -> dict:
        with httpx.Client(verify=ssl_context(self.ca_file), auth=(self.user, self.password), timeout=30.0) as client:
            resp = client.request(method, f"{self.url}/_plugins/_security/api/{path}", json=body)
        if resp.status_code >= 300 and not (method == "DELETE" and resp.status_code == 404):
            raise EngineError(f"security REST API {method} {path} answered HTTP {resp.status_code}: {resp.text[:300]}")
        return resp.json() if resp.content else {}

    def put_user(self, name: str, password: str, *, backend_roles: tuple[str, ...] = ()) -> None:
        """Create (or replace) internal user ``name``."""
        self._call("PUT", f"internalusers/{name}", {"password": password, "backend_roles": list(backend_roles)})

    def put_role(self, name: str, *, cluster_permissions: tuple[str, ...] = (), index_permissions: tuple[dict, ...] = ()) -> None:
        """Create (or replace) role ``name``; ``index_permissions`` as the API takes them (``index_patterns``,
        ``allowed_actions``, ``dls`` — a query as a JSON string —, ``fls`` — fields, ``~field`` to hide one)."""
        self._call("PUT", f"roles/{name}", {"cluster_permissions": list(cluster_permissions), "index_permissions": list(index_permissions)})

    def map_role(self, role: str, *, users: tuple[str, ...] = (), backend_roles: tuple[str, ...] = ()) -> None:
        """Map ``role`` to ``users`` (and ``backend_roles``), replacing its mapping."""
        self._call("PUT", f"rolesmapping/{role}", {"users": list(users), "backend_roles": list(backend_roles)})

    def delete_user(self, name: str) -> None:
        self._call("DELETE", f"internalusers/{name}")

    def delete_role(self, name: str) -> None:
        self._call("DELETE", f"roles/{name}")
        self._call("DELETE", f"rolesmapping/{name}")

    def whoami(self) -> dict:
        """``GET /_plugins/_security/authinfo`` as the admin (a check that the plugin answers)."""
        with httpx.Client(verify=ssl_context(self.ca_file), auth=(self.user, self.password), timeout=30.0) as client:
            return client.get(f"{self.url}/_plugins/_security/authinfo").json()


def admin_http_kwargs(inst: Path) -> dict[str, Any]:
    """``httpx`` keyword arguments for the harness's own calls to a secured node (readiness, plugin lists)."""
    return {"verify": ssl_context(ca_file(inst)), "auth": (ADMIN_USER, admin_password(inst))}


def describe(inst: Path) -> dict[str, str]:
    """What a client needs to reach the secured node of ``inst``, without the password itself."""
    return {"ca_file": str(ca_file(inst)), "admin_user": ADMIN_USER, "admin_password_file": str(admin_password_file(inst))}


__all__ = [
    "ADMIN_DN", "ADMIN_USER", "CA_FILE", "NODE_DN", "SecurityAdmin", "admin_http_kwargs", "admin_password", "admin_password_file",
    "ca_file", "describe", "ensure_tls", "node_settings", "ssl_context", "tls_dir", "write_security_config",
]
