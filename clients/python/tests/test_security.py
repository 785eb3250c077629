"""`U` authentication (`--auth-file`) and TLS (`ssl.SSLContext`)."""

from __future__ import annotations

import os
import ssl
import subprocess
import tempfile

import pytest

import baton
from conftest import Nodes

USERS = """
[[user]]
name = "billing"
secret = "s3cr3t-value"
prefixes = ["billing/"]
"""


def users_file(nodes: Nodes) -> str:
    """USERS in a file only its owner reads, removed with `nodes`."""
    path = os.path.join(nodes.scratch_dir("baton-auth-"), "users.toml")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, USERS.encode())
    os.close(fd)
    return path


@pytest.fixture
def auth_node(nodes):
    return nodes.start(["--auth-file", users_file(nodes)])


def test_nodes_leave_no_scratch_directories(monkeypatch, tmp_path):
    # Logs, users files, cluster keys: all under the temporary directory,
    # all gone once the nodes are.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    nodes = Nodes()
    nodes.start(["--auth-file", users_file(nodes)])
    nodes.cluster(2, "priority")
    assert len(os.listdir(tmp_path)) == 5
    nodes.close()
    assert os.listdir(tmp_path) == []


def test_credentials_prefixes_and_refusals(auth_node):
    with baton.Client([auth_node.addr], user="billing", secret="s3cr3t-value") as client:
        lock = client.acquire("billing/1", 1, 30)
        assert client.inspect("billing/1").token == lock.token
        with pytest.raises(baton.PermissionDenied) as err:
            client.acquire("orders/1", 1, 30)
        assert err.value.key == "orders/1"
        assert client.status()[0].ok
        lock.release()
    with pytest.raises(baton.AuthenticationFailed):
        baton.Client([auth_node.addr], user="billing", secret="wrong")
    # Without credentials every connection is refused service: connecting
    # says so, as it does for wrong credentials.
    with pytest.raises(baton.AuthenticationRequired):
        baton.Client([auth_node.addr])


def test_credentials_to_a_node_without_users(node):
    with pytest.raises(baton.AuthenticationFailed):
        baton.Client([node.addr], user="billing", secret="x")


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs():
    with tempfile.TemporaryDirectory(prefix="baton-tls-") as d:
        yield _make_certs(d)


def _make_certs(d: str) -> str:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=baton-test-ca", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key", "-out", "node.csr",
             "-subj", "/CN=127.0.0.1", cwd=d)
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "node.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)
    return d


def test_tls(nodes, node, certs):
    tls_node = nodes.start(["--tls-cert", os.path.join(certs, "node.pem"),
                            "--tls-key", os.path.join(certs, "node.key")])
    ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem"))
    with baton.Client([tls_node.addr], tls=ctx) as client:
        lock = client.acquire("tls/1", 1, 30)
        assert client.inspect("tls/1").token == lock.token
        lock.release()
    # A plaintext client of a TLS node, a TLS client of a plaintext node, a
    # CA that did not sign the node's certificate: a clear error, at once.
    # (The first, when the client is made: a dial counts once the node answered.)
    with pytest.raises(baton.TlsError):
        baton.Client([tls_node.addr])
    with pytest.raises(baton.TlsError):
        baton.Client([node.addr], tls=ctx)
    with pytest.raises(baton.TlsError):
        baton.Client([tls_node.addr], tls=ssl.create_default_context())
