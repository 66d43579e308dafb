"""The secure stack's certificates (``up --secure``): a CA, the broker's certificate (which
PostgreSQL serves too, when its settings ask for TLS) and the mTLS listener's client
certificate, made with openssl once per home.

It exists apart from ``kafka_nodes`` because two parts use it: the Kafka nodes' listeners and
PostgreSQL's TLS.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from stack.local.home import StackHome
from stack.local.startup import StackError


@dataclass
class Certificates:
    """The certificates in ``$CRONSTREAM_HOME/secure``, never in the repository."""

    home: StackHome

    @property
    def dir(self) -> Path:
        return self.home.s.home / "secure"

    def ensure(self) -> None:
        """A CA, a broker certificate for the stack's host and localhost (PostgreSQL's too)
        and a client certificate (``client.crt``, its PKCS#8 key
        ``client.key``: the mTLS listener's), made with openssl once per home
        (``$CRONSTREAM_HOME/secure``, never in the repository)."""
        d = self.dir
        if not ((d / "broker.pem").exists() and (d / "ca.pem").exists()):
            if shutil.which("openssl") is None:
                raise StackError("kafka", "openssl is needed for --secure (Debian: apt-get "
                                 "install openssl)")
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o700)
            self._openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
                           "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=cronstream local CA",
                           "-addext", "basicConstraints=critical,CA:TRUE",
                           "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
            host = self.home.s.host
            self._signed_by_ca("broker", f"/CN={host}",
                               f"subjectAltName=IP:{host},IP:127.0.0.1,DNS:localhost\n"
                               "extendedKeyUsage=serverAuth,clientAuth\n")
            (d / "broker.pem").write_text((d / "broker.key").read_text()
                                          + (d / "broker.crt").read_text())
            for secret_file in ("ca.key", "broker.pem"):
                os.chmod(d / secret_file, 0o600)
        if not (d / "client.crt").exists():  # a home made before the mTLS listener gets one too
            self._signed_by_ca("client", "/CN=cronstream", "extendedKeyUsage=clientAuth\n")

    def _signed_by_ca(self, name: str, subject: str, extensions: str) -> None:
        """``name.key`` (PKCS#8, mode 0600) and ``name.crt`` signed by the stack's CA."""
        d = self.dir
        (d / f"{name}.ext").write_text(extensions)
        self._openssl(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                       "-out", f"{name}.csr", "-subj", subject])
        self._openssl(["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                       "-CAcreateserial", "-days", "3650", "-out", f"{name}.crt",
                       "-extfile", f"{name}.ext"])
        os.chmod(d / f"{name}.key", 0o600)

    def _openssl(self, argv: list[str]) -> None:
        out = subprocess.run(["openssl", *argv], cwd=self.dir, capture_output=True,
                             text=True)
        if out.returncode != 0:
            raise StackError("kafka", f"openssl {' '.join(argv[:2])} failed: {out.stderr[-300:]}")
