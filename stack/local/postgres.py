"""The local stack's PostgreSQL, from Debian's packages: its cluster in the home (initdb with
trust, or SCRAM when the settings give a password), start and stop with pg_ctl as the
``postgres`` user, its health, TLS when the settings' sslmode asks for it, and the ledger's
tables (``apply_ledger_sql``) that the sinks write into.

It exists so the database the sinks fill is one part of the stack, started and stopped on its
own (``up --part services`` starts it beside Kafka, as on a host of its own).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from stack.local.certificates import Certificates
from stack.local.home import StackHome
from stack.local.startup import StackError, port_taken, say, wait_healthy
from streams.runtime.settings import REPO_ROOT, Settings

# the Postgres tables and trigger the ledger's sinks write into
LEDGER_SQL = REPO_ROOT / "connectors" / "ledger.sql"


def apply_ledger_sql(dsn: str) -> None:
    """Create the ledger tables and the trigger that explodes chunk outcomes into ledger rows
    (connectors/ledger.sql, idempotent) before any sink writes."""
    import psycopg
    from psycopg import conninfo

    where = conninfo.conninfo_to_dict(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute(LEDGER_SQL.read_text())
    except psycopg.Error as exc:
        raise StackError("postgres", f"could not create the ledger tables on {where.get('host')}:"
                         f"{where.get('port')} ({LEDGER_SQL.name}): {str(exc).strip()[:300]}"
                         ) from exc


@dataclass
class Postgres:
    """The PostgreSQL cluster in ``home``/postgres, serving TLS with ``certificates`` when asked."""

    home: StackHome
    certificates: Certificates

    @property
    def s(self) -> Settings:
        return self.home.s

    def _pg_bin(self) -> Path:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                       key=lambda p: int(Path(p).parts[-3]))
        if not found:
            if os.geteuid() != 0:
                raise StackError("postgres", "PostgreSQL server binaries not found; install the "
                                 "Debian package 'postgresql' (needs root)")
            say("installing PostgreSQL from Debian packages (apt-get)")
            log = self.home.log("apt")
            self.s.log_dir.mkdir(parents=True, exist_ok=True)
            with open(log, "ab") as out:
                env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
                for cmd in (["apt-get", "update"],
                            ["apt-get", "install", "-y", "--no-install-recommends", "postgresql"]):
                    if subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=env) != 0:
                        raise StackError("postgres", f"{' '.join(cmd)} failed", log)
            return self._pg_bin()
        return Path(found[-1]).parent

    def _as_pg_user(self, argv: list[str]) -> list[str]:
        """PostgreSQL refuses to run as root: run its tools as the Debian 'postgres' user."""
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv

    def _pg_dirs(self) -> tuple[Path, Path]:
        base = self.s.home / "postgres"
        data, sock = base / "data", base / "sock"
        for d in (base, sock):
            d.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(base, "postgres", "postgres")
            shutil.chown(sock, "postgres", "postgres")
            # the postgres user must be able to reach the data dir through every parent
            for parent in [base, *base.parents]:
                mode = parent.stat().st_mode
                if not mode & 0o001:
                    os.chmod(parent, mode | 0o001)
        return data, sock

    def start_postgres(self) -> None:
        name, log = "postgres", self.s.home / "postgres" / "postgres.log"
        data, sock = self._pg_dirs()
        pg_bin = self._pg_bin()
        if (data / "postmaster.pid").exists() and self.postgres_healthy():
            say(f"postgres already running on {self.s.host}:{self.s.pg_port}")
            return
        if port_taken(self.s.pg_port, self.s.host):
            raise StackError(name, f"port {self.s.pg_port} is already in use by another process; "
                             "set CRONSTREAM_PG_PORT", log)
        if not (data / "PG_VERSION").exists():
            self._initdb(pg_bin, data)
        say(f"starting postgres on {self.s.host}:{self.s.pg_port}")
        out = subprocess.run(self._as_pg_user([
            str(pg_bin / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
            "-o", f"-p {self.s.pg_port} -c listen_addresses={self.s.host} -k {sock}"
                  f"{self.pg_tls_options()}", "start"]),
            capture_output=True, text=True)
        if out.returncode != 0:
            raise StackError(name, f"pg_ctl start failed: {out.stdout.strip()[-300:]}", log)
        wait_healthy(name, self.postgres_healthy, 30, log)
        import psycopg

        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname='cronstream'").fetchone()
            if not exists:
                conn.execute("CREATE DATABASE cronstream")

    @property
    def admin_dsn(self) -> str:
        """The stack's PostgreSQL as the settings reach it, in the database ``postgres`` (that
        ``cronstream`` is created from)."""
        from psycopg import conninfo

        return conninfo.make_conninfo(self.s.pg_dsn, dbname="postgres")

    def _initdb(self, pg_bin: Path, data: Path) -> None:
        """A new cluster: trust on loopback (the local stack), or, when the settings give a
        password (``CRONSTREAM_PG_PASSWORD``), SCRAM for every TCP client, and for clients off
        the host only over TLS when ``CRONSTREAM_PG_SSLMODE`` asks for it: PostgreSQL as a
        managed one is reached."""
        say(f"initialising a PostgreSQL cluster in {data}")
        password = self.s.pg_params.get("password")
        auth = ["--auth=trust"]
        pwfile = data.parent / "initdb.pw"
        if password:
            pwfile.write_text(password)
            if os.geteuid() == 0:
                shutil.chown(pwfile, "postgres", "postgres")
            os.chmod(pwfile, 0o600)
            auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
        try:
            out = subprocess.run(self._as_pg_user([
                str(pg_bin / "initdb"), "-D", str(data), "-U", "cronstream", *auth,
                "-E", "UTF8", "--locale=C.UTF-8"]), capture_output=True, text=True)
        finally:
            pwfile.unlink(missing_ok=True)
        if out.returncode != 0:
            raise StackError("postgres", f"initdb failed: {out.stderr.strip()[-500:]}")
        if self.s.host != "127.0.0.1":
            method = "scram-sha-256" if password else "trust"
            kind = "hostssl" if self.pg_tls else "host"
            with open(data / "pg_hba.conf", "a") as hba:
                hba.write(f"{kind} all all 0.0.0.0/0 {method}\n")

    @property
    def pg_tls(self) -> bool:
        """PostgreSQL serves TLS: the settings' sslmode requires it."""
        return self.s.pg_params.get("sslmode") in ("require", "verify-ca", "verify-full")

    def pg_tls_options(self) -> str:
        """``-c ssl=on`` and the server's certificate and key (the broker's, signed by the
        stack's CA for its host) copied where only the postgres user reads them; nothing
        without TLS."""
        if not self.pg_tls:
            return ""
        self.certificates.ensure()
        base = self.s.home / "postgres"
        for name, source in (("server.crt", "broker.crt"), ("server.key", "broker.key")):
            shutil.copy(self.certificates.dir / source, base / name)
            if os.geteuid() == 0:
                shutil.chown(base / name, "postgres", "postgres")
            os.chmod(base / name, 0o600)
        return f" -c ssl=on -c ssl_cert_file={base / 'server.crt'} -c ssl_key_file={base / 'server.key'}"

    def postgres_healthy(self) -> bool:
        """False when nothing answers: after a machine restart ``postmaster.pid`` is left behind
        with no server, and ``up`` must start one (pg_ctl clears the stale file), not crash."""
        import psycopg

        try:
            with psycopg.connect(self.admin_dsn, connect_timeout=2) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.OperationalError:
            return False

    def stop_postgres(self) -> bool:
        data = self.s.home / "postgres" / "data"
        if not (data / "postmaster.pid").exists():
            return False
        subprocess.run(self._as_pg_user([str(self._pg_bin() / "pg_ctl"), "-D", str(data),
                                         "-m", "fast", "-w", "stop"]), capture_output=True)
        return True
