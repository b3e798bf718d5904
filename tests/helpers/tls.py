"""Certificates for TLS tests (a throwaway CA from trustme), and whether this machine's
redis-server speaks TLS at all."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import trustme

from tests.helpers.redis_server import TlsFiles


def make_tls_files(
    directory: Path, server_names: tuple[str, ...] = ("127.0.0.1", "localhost")
) -> TlsFiles:
    """A CA, a server certificate for `server_names` (by default 127.0.0.1 and
    localhost) and a client certificate, as PEM files."""
    ca = trustme.CA()
    server = ca.issue_cert(*server_names)
    client = ca.issue_cert("poolsup-client")
    files = TlsFiles(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        server_name=server_names[0],
    )
    ca.cert_pem.write_to_path(str(files.ca))
    for cert, cert_path, key_path in ((server, files.server_cert, files.server_key),
                                      (client, files.client_cert, files.client_key)):
        cert.private_key_pem.write_to_path(str(key_path))
        with cert_path.open("wb") as out:
            for pem in cert.cert_chain_pems:
                out.write(pem.bytes())
    return files


@functools.cache
def redis_server_lacks_tls() -> str | None:
    """Why TLS tests cannot run here, or None if redis-server was built with TLS.

    A build without TLS refuses `tls-port` as an unknown directive; a build with it
    gets past the directive and fails on the missing certificate files, without
    listening anywhere."""
    result = subprocess.run(
        ["redis-server", "--port", "0", "--tls-port", "1", "--save", "",
         "--tls-cert-file", "/nonexistent", "--tls-key-file", "/nonexistent",
         "--tls-ca-cert-file", "/nonexistent"],
        capture_output=True, text=True, timeout=10,
    )
    if "Bad directive" in result.stdout + result.stderr:
        return "this machine's redis-server was built without TLS (tls-port is unknown)"
    return None
