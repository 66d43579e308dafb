"""The stack's home (``$CRONSTREAM_HOME``, default ``.local/``) and what every part takes from
it: pid files, logs, secrets, the region record, and the Java parts built into it.

It exists so the parts of the local stack share one layout of the home: a part asks its
``StackHome`` where its pid file, log or secret is, and how to launch a JVM on the home's jars.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stack.local.startup import StackError, say
from streams.runtime.settings import REPO_ROOT, Settings

JAVA_POMS = (REPO_ROOT / "stack" / "pom.xml", REPO_ROOT / "connectors" / "avro-converter" / "pom.xml")

# a home that is one region of a local two-region stack says so here (``stack.two_regions``): its
# name, and the other region's name, home and brokers
REGIONS_FILE = "regions.json"


def region_record(home: Path) -> dict[str, Any] | None:
    """The home's region record, or None for a one-region stack."""
    path = home / REGIONS_FILE
    if not path.exists():
        return None
    record: dict[str, Any] = json.loads(path.read_text())
    return record


@dataclass
class StackHome:
    """Where the stack made from ``s`` keeps its files."""

    s: Settings

    def pidfile(self, name: str) -> Path:
        return self.s.run_dir / f"{name}.pid"

    def log(self, name: str) -> Path:
        self.s.log_dir.mkdir(parents=True, exist_ok=True)  # a wiped .local/logs is re-made
        return self.s.log_dir / f"{name}.log"

    @property
    def lib(self) -> Path:
        return self.s.home / "lib"

    @property
    def plugins(self) -> Path:
        return self.s.home / "plugins"

    def secret(self, env: str, name: str) -> str:
        """``$env`` if set, else a random secret kept in ``.local/secrets/name`` (mode 0600)."""
        if env and self.s.given(env):
            return str(self.s.given(env))
        path = self.s.home / "secrets" / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(32))
        return path.read_text().strip()

    # -- java parts ----------------------------------------------------------------------------
    def ensure_java_parts(self) -> None:
        """Resolve Kafka, Connect, Debezium and build the converter, once per content of what they
        read. ``package`` runs the converter's JUnit tests first, against ``schemas/`` (history
        included), so the schemas count too: a schema the converter cannot read fails here, with
        the Maven log, not later as a stopped ledger sink."""
        sources = [*JAVA_POMS, *sorted((REPO_ROOT / "connectors" / "avro-converter" / "src").rglob("*")),
                   *sorted((REPO_ROOT / "schemas").rglob("*.avsc"))]
        digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources if p.is_file())).hexdigest()[:16]
        marker = self.s.home / f".java-parts-{digest}"
        if marker.exists():
            return
        if shutil.which("mvn") is None or shutil.which("java") is None:
            raise StackError("java", "java and mvn (Maven) must be on PATH")
        self.s.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log("maven")
        for pom in JAVA_POMS:
            say(f"resolving {pom.relative_to(REPO_ROOT)} from Maven Central (first run only)")
            with open(log, "ab") as out:
                rc = subprocess.call(
                    ["mvn", "-B", "-q", "-f", str(pom), "package",
                     f"-Dstack.dir={self.s.home}", f"-Dplugin.dir={self.plugins}/cronstream-avro-converter"],
                    stdout=out, stderr=subprocess.STDOUT)
            if rc != 0:
                raise StackError("maven", f"building {pom.relative_to(REPO_ROOT)} failed (exit {rc})", log)
        marker.write_text("ok\n")

    def java(self, name: str, main: str, heap: str, *args: str) -> list[str]:
        """The command line of a JVM running ``main`` on the home's jars, logging as ``name``
        (the Kafka nodes, Connect, MirrorMaker 2 and Kafka's tools all start this way)."""
        log4j = self.s.home / "log4j.properties"
        log4j.write_text(
            "log4j.rootLogger=INFO, stdout\n"
            "log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            "log4j.logger.org.reflections=ERROR\n"
        )
        return ["java", f"-Xmx{heap}", "-XX:+UseG1GC", f"-Dlog4j.configuration=file:{log4j}",
                f"-Dcronstream.component={name}", "-cp", f"{self.lib}/*", main, *args]
