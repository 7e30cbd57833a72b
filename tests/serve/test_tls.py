"""TLS on the HTTP and binary listeners (engine.tls), with certificates made
here by `cryptography`: curl and tritonclient over https, the binary client
over TLS, plain HTTP to the TLS port refused cleanly, a client trusting
another CA refused, and mutual TLS."""

from __future__ import annotations

import datetime
import ipaddress
import json
import shutil
import socket
import ssl
import subprocess
import urllib.request

import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from engine.client import Client
from serve_support import ServerProcess, _kernel_env, free_port, startup_error

X = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
BODY = json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32",
                               "data": X.ravel().tolist()}]}).encode()


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key, path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def make_ca(d, name: str):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256()))
    (d / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert


def make_leaf(d, name: str, ca, *, server: bool):
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    (d / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, d / f"{name}.key")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, other = make_ca(d, "ca"), make_ca(d, "other-ca")
    make_leaf(d, "server", ca, server=True)
    make_leaf(d, "client", ca, server=False)
    make_leaf(d, "stranger", other, server=False)
    return d


def client_context(pki, ca="ca.pem", cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / ca))
    if cert:
        ctx.load_cert_chain(pki / f"{cert}.crt", pki / f"{cert}.key")
    return ctx


class TlsServer(ServerProcess):
    """ServerProcess speaking https; readiness checked through the test CA."""

    def __init__(self, tmp, config, env, ctx: ssl.SSLContext):
        self.ctx = ctx
        super().__init__(tmp, config, env)

    def answers_ready(self) -> bool:
        return self.request("GET", "/v2/health/ready")[0] == 200

    def request(self, method: str, path: str, body: bytes | None = None, ctx: ssl.SSLContext | None = None):
        req = urllib.request.Request(f"https://{self.url}{path}", data=body, method=method)
        try:
            with urllib.request.urlopen(req, timeout=10, context=ctx or self.ctx) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except urllib.error.URLError as e:
            raise e.reason if isinstance(e.reason, Exception) else e  # the TLS error itself, for the tests


@pytest.fixture
def tls_server(tmp_path, mlp_file, pki):
    servers = []

    def start(client_ctx: ssl.SSLContext | None = None, **tls):
        d = tmp_path / f"tls{len(servers)}"
        d.mkdir()
        config = {"listen": "127.0.0.1", "http_port": free_port(), "binary_port": free_port(),
                  "grpc_port": free_port(), "threads": 1,
                  "state_dir": str(d / "state"), "log_dir": str(d / "log"), "limits": {"drain_delay_s": 0},
                  "models": [{"name": "mlp", "path": str(mlp_file)}],
                  "tls": {"cert_file": str(pki / "server.crt"), "key_file": str(pki / "server.key"), **tls}}
        servers.append(TlsServer(d, config, _kernel_env(), client_ctx or client_context(pki)))
        return servers[-1]

    yield start
    for s in servers:
        assert s.stop() == 0, s.log_path.read_text()


def test_https_and_binary_over_tls(tls_server, pki):
    server = tls_server()
    assert server.request("POST", "/v2/models/mlp/infer", BODY)[0] == 200
    with Client("127.0.0.1", server.binary_port, ssl_context=client_context(pki)) as c:
        assert c.infer("mlp", {"x": X})["y"].shape == (1, 4)
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl not installed: the https round trip above is the check that ran")
    out = subprocess.run([curl, "-sS", "--cacert", str(pki / "ca.pem"), "-o", "/dev/null", "-w", "%{http_code}",
                          "-X", "POST", "--data-binary", BODY.decode(),
                          f"https://127.0.0.1:{server.http_port}/v2/models/mlp/infer"],
                         capture_output=True, text=True, timeout=30)
    assert out.stdout == "200", out.stderr
    started = next(r for r in server.logs() if r.get("event") == "started")
    assert started["tls"] is True and started["mutual_tls"] is False


def test_tritonclient_over_https(tls_server, pki):
    tritonclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] not installed")
    import gevent.ssl

    server = tls_server()
    client = tritonclient.InferenceServerClient(server.url, ssl=True, ssl_options={"ca_certs": str(pki / "ca.pem")},
                                                ssl_context_factory=gevent.ssl.create_default_context)
    try:
        assert client.is_server_ready()
        inp = tritonclient.InferInput("x", [1, 16], "FP32")
        inp.set_data_from_numpy(X)
        assert client.infer("mlp", [inp]).as_numpy("y").shape == (1, 4)
    finally:
        client.close()


def test_plain_http_and_a_wrong_ca_are_refused_cleanly(tls_server, pki):
    server = tls_server()
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as s:
        s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while chunk := s.recv(4096):
            got += chunk
    assert not got.startswith(b"HTTP/"), got  # no plain-text answer: the TLS handshake failed and closed
    with pytest.raises(ssl.SSLCertVerificationError):
        server.request("GET", "/v2/health/ready", ctx=client_context(pki, "other-ca.pem"))
    with pytest.raises(ssl.SSLCertVerificationError):
        Client("127.0.0.1", server.binary_port, ssl_context=client_context(pki, "other-ca.pem")).connect()
    assert server.request("GET", "/v2/health/ready")[0] == 200  # and the server serves on
    text = server.log_path.read_text()
    assert "Traceback" not in text, text


def test_mutual_tls(tls_server, pki):
    server = tls_server(client_context(pki, cert="client"), client_ca_file=str(pki / "ca.pem"))
    assert server.request("POST", "/v2/models/mlp/infer", BODY)[0] == 200
    for ctx in (client_context(pki), client_context(pki, cert="stranger")):  # no certificate; another CA's
        with pytest.raises((ssl.SSLError, ConnectionError)):
            server.request("GET", "/v2/health/ready", ctx=ctx)
    started = next(r for r in server.logs() if r.get("event") == "started")
    assert started["mutual_tls"] is True
    # gRPC takes the same certificates: the client's is required there too.
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    url = f"127.0.0.1:{server.config['grpc_port']}"
    with grpcclient.InferenceServerClient(url, ssl=True, root_certificates=str(pki / "ca.pem"),
                                          private_key=str(pki / "client.key"),
                                          certificate_chain=str(pki / "client.crt")) as c:
        inp = grpcclient.InferInput("x", [1, 16], "FP32")
        inp.set_data_from_numpy(X)
        assert c.infer("mlp", [inp]).as_numpy("y").shape == (1, 4)
    with grpcclient.InferenceServerClient(url, ssl=True, root_certificates=str(pki / "ca.pem")) as c, \
            pytest.raises(InferenceServerException, match="UNAVAILABLE"):
        c.is_server_live()


@pytest.mark.parametrize("tls, expected", [
    ({"cert_file": "missing.crt", "key_file": "server.key"}, "cannot read TLS certificate or key"),
    ({"cert_file": "server.crt", "key_file": "client.key"}, "cannot load TLS certificate/key pair"),
    ({"cert_file": "server.crt"}, "engine.tls.key_file: TLS needs both cert_file and key_file"),
], ids=["missing", "mismatched-key", "no-key"])
def test_bad_tls_files_are_one_line_startup_errors(tmp_path, mlp_file, pki, tls, expected):
    err = startup_error(tmp_path, {"http_port": free_port(), "binary_port": None, "log_dir": str(tmp_path),
                                   "models": [{"name": "mlp", "path": str(mlp_file)}],
                                   "tls": {k: str(pki / v) for k, v in tls.items()}})
    assert expected in err
