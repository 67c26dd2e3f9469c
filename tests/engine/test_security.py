"""The secured OpenSearch node (``jingpai engine up --plugins security``) and the engine client's credentials and TLS:
each refusal (wrong password, no credentials, untrusted certificate, plain HTTP to a TLS port, a missing
permission) is one error naming what to fix, and never the password."""

from __future__ import annotations

import ssl
import uuid
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.engine import security
from jingpai.engine.client import (
    EngineAuth, EngineAuthError, EngineConnectionError, EnginePermissionError, EngineTLSError, access_error, connect,
)
from jingpai.engine.settings import SECURITY_PLUGIN_SHA256, SECURITY_PLUGIN_VERSIONS, EngineModuleError, EngineSettings
from tests.conftest import SecuredNode

PASSWORD = "Vq8-Kw3z-Lm5t-Rx7n"


# ------------------------------------------------------------------ settings and certificates (no node)


def test_a_secured_node_runs_the_release_maven_central_serves_the_plugin_for() -> None:
    settings = EngineSettings(kind="opensearch", port=9400, plugins=("security",))
    assert settings.resolved_version == "2.19.1" and settings.secured
    assert settings.url == "https://127.0.0.1:9400"
    assert EngineSettings(kind="opensearch", port=9400, plugins=("knn", "security")).resolved_version == "2.19.1"
    assert not EngineSettings(kind="opensearch", port=9400).secured
    with pytest.raises(EngineModuleError) as err:
        EngineSettings(kind="opensearch", version="2.19.6", plugins=("security",))
    assert str(err.value) == (
        "no security plugin is served on Maven Central for OpenSearch 2.19.6 (a plugin must match the engine version exactly); "
        "valid --version with --plugins security: 2.19.1, 2.19.4 (without --version: 2.19.1)")
    with pytest.raises(EngineModuleError, match=r"are for --kind opensearch only"):
        EngineSettings(kind="elasticsearch", plugins=("security",))


def test_every_pinned_security_zip_has_its_sha256() -> None:
    assert set(SECURITY_PLUGIN_VERSIONS.values()) <= set(SECURITY_PLUGIN_SHA256)


def test_the_certificates_are_made_locally_for_loopback_and_kept(tmp_path: Path) -> None:
    from cryptography import x509

    folder = security.ensure_tls(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == sorted(security.TLS_FILES)
    node = x509.load_pem_x509_certificate((folder / "node.pem").read_bytes())
    ca = x509.load_pem_x509_certificate((folder / "root-ca.pem").read_bytes())
    node.verify_directly_issued_by(ca)
    assert node.subject.rfc4514_string() == security.NODE_DN
    sans = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    admin = x509.load_pem_x509_certificate((folder / "admin.pem").read_bytes())
    assert admin.subject.rfc4514_string() == security.ADMIN_DN
    assert (folder / "node-key.pem").stat().st_mode & 0o077 == 0
    before = (folder / "root-ca.pem").read_bytes()
    security.ensure_tls(tmp_path)  # kept: a client's CA file stays valid across restarts
    assert (folder / "root-ca.pem").read_bytes() == before
    assert isinstance(security.ssl_context(folder / "root-ca.pem"), ssl.SSLContext)


def test_credentials_are_checked_before_any_request(tmp_path: Path) -> None:
    with pytest.raises(EngineAuthError, match=r"--engine-password \(JINGPAI_ENGINE_PASSWORD\) is missing"):
        EngineAuth(user="alice")
    with pytest.raises(EngineAuthError, match="not both"):
        EngineAuth(user="alice", password="x", api_key="k")
    with pytest.raises(EngineTLSError, match=r"the engine CA file .*nope.pem does not exist"):
        EngineAuth(ca_file=tmp_path / "nope.pem")
    auth = EngineAuth(user="alice", password=PASSWORD)
    assert PASSWORD not in repr(auth) and auth.who == "user 'alice'"
    assert EngineAuth(api_key="abc").headers() == {"Authorization": "ApiKey abc"}


# ------------------------------------------------------------------ the secured node


@pytest.fixture(scope="module")
def reader(opensearch_secured: SecuredNode):
    """A user who may read one index (``sec-eng-<hex>-*``) and nothing else; the index; one doc in it."""
    node = opensearch_secured
    prefix = f"sec-eng-{uuid.uuid4().hex[:6]}"
    user = f"reader-{uuid.uuid4().hex[:6]}"
    node.admin.put_user(user, PASSWORD)
    node.admin.put_role(user, index_permissions=({"index_patterns": [f"{prefix}-*"], "allowed_actions": ["read"]},))
    node.admin.map_role(user, users=(user,))
    admin = node.admin_engine()
    admin.index_document(f"{prefix}-a", "1", {"t": "hello"}, refresh=True)
    admin.index_document(f"{prefix}-b", "1", {"t": "hello"}, refresh=True)
    yield user, prefix
    node.admin.delete_role(user)
    node.admin.delete_user(user)
    admin.raw.indices.delete(index=f"{prefix}-*")
    admin.close()


def test_the_admin_reaches_the_node_over_tls_and_anyone_else_needs_credentials(opensearch_secured: SecuredNode) -> None:
    node = opensearch_secured
    assert node.url.startswith("https://127.0.0.1:")
    assert node.admin.whoami()["user_name"] == "admin"
    anonymous = httpx.get(f"{node.url}/", verify=security.ssl_context(node.ca_file))
    assert anonymous.status_code == 401
    engine = node.admin_engine()
    assert engine.kind == "opensearch" and engine.version == "2.19.1"
    assert "opensearch-security" in engine.modules()


def test_a_user_reads_its_index_and_a_missing_permission_names_the_user_and_the_fix(opensearch_secured: SecuredNode, reader) -> None:
    user, prefix = reader
    engine = connect(opensearch_secured.url, auth=opensearch_secured.auth(user, PASSWORD))
    # a user without cluster:monitor permissions still connects (the version is not the user's to read)
    assert engine.kind == "opensearch" and engine.version == "unknown"
    assert engine.search(f"{prefix}-a", {"query": {"match_all": {}}})["hits"]["total"]["value"] == 1
    with pytest.raises(Exception) as err:
        engine.search("other-index", {"query": {"match_all": {}}})
    problem = engine.access_error(err.value, action="search other-index")
    assert isinstance(problem, EnginePermissionError)
    assert str(problem) == (
        f"the engine at {opensearch_secured.url} refused user '{user}' the permission to search other-index (HTTP 403: no permissions "
        f"for [indices:data/read/search] and User [name={user}, backend_roles=[], requestedTenant=null]); grant the user a role "
        "with that permission (docs/security.md lists what each jingpai part needs)")
    assert PASSWORD not in str(problem)
    engine.close()


def test_each_refusal_names_what_to_fix(opensearch_secured: SecuredNode, reader) -> None:
    node, (user, _) = opensearch_secured, reader
    with pytest.raises(EngineAuthError) as err:
        connect(node.url, auth=node.auth(user, "Wrong-Pass-123"))
    assert str(err.value) == (
        f"the engine at {node.url} rejected the credentials of user '{user}' (HTTP 401); check --engine-user / --engine-password "
        "(JINGPAI_ENGINE_USER / JINGPAI_ENGINE_PASSWORD) or --engine-api-key")
    with pytest.raises(EngineAuthError, match=r"requires authentication \(HTTP 401\); pass --engine-user and --engine-password"):
        connect(node.url, auth=node.auth())
    with pytest.raises(EngineTLSError) as tls:
        connect(node.url, auth=EngineAuth(user=user, password=PASSWORD))
    assert str(tls.value) == (
        f"the TLS certificate of the engine at {node.url} is not trusted by the system's CAs; pass the PEM file of the CA that signed "
        "it with --engine-ca-file (JINGPAI_ENGINE_CA_FILE); a `jingpai engine up --plugins security` node prints its CA file")
    plain = node.url.replace("https://", "http://")
    with pytest.raises(EngineConnectionError, match=r"closed the connection without an answer; if it serves HTTPS .*use https://"):
        connect(plain, auth=node.auth(user, PASSWORD))
    # not an access problem: no translation
    assert access_error(ValueError("x"), url=node.url) is None


def test_the_cli_takes_credentials_from_options_or_the_environment_and_never_prints_them(opensearch_secured: SecuredNode, reader) -> None:
    node, (user, prefix) = opensearch_secured, reader
    runner = CliRunner()
    base = ["index", "status", f"{prefix}-a", "--engine", node.url, "--engine-ca-file", str(node.ca_file)]
    wrong = runner.invoke(cli, [*base, "--engine-user", user, "--engine-password", "Wrong-Pass-123"])
    assert wrong.exit_code == 1
    assert f"rejected the credentials of user '{user}' (HTTP 401)" in wrong.output and "Wrong-Pass-123" not in wrong.output
    env = {"JINGPAI_ENGINE_USER": user, "JINGPAI_ENGINE_PASSWORD": PASSWORD}
    refused = runner.invoke(cli, base, env=env)  # `index status` lists indices: the reader may not
    assert refused.exit_code == 1, refused.output
    assert f"refused user '{user}' the permission" in refused.output and "grant the user a role" in refused.output
    untrusted = runner.invoke(cli, ["index", "status", "x", "--engine", node.url], env=env)
    assert untrusted.exit_code == 1 and "is not trusted by the system's CAs" in untrusted.output
    for result in (wrong, refused, untrusted):
        assert PASSWORD not in result.output and "Traceback" not in result.output
    admin_env = {"JINGPAI_INDEX_ENGINE_USER": "admin", "JINGPAI_ENGINE_PASSWORD": node.admin.password,
                 "JINGPAI_ENGINE_CA_FILE": str(node.ca_file)}
    missing = runner.invoke(cli, ["index", "status", f"{prefix}-none", "--engine", node.url], env=admin_env)
    assert missing.exit_code == 1 and "no jingpai index versions named" in missing.output, missing.output
    assert node.admin.password not in missing.output
