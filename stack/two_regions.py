"""The local two-region stack (``./dev stack up --regions 2``, docs/regions.md): region a is the
usual stack (``CRONSTREAM_HOME`` and its ports), region b a second Kafka cluster and Kafka Connect
in ``$CRONSTREAM_HOME/region-b`` on the ports ``CRONSTREAM_STANDBY_PORT_OFFSET`` (1000) above
region a's, with MirrorMaker 2 pulling from the active region into it. Both regions use region
a's PostgreSQL (the PostgreSQL of record, holding the authority) and its SES server: what a real
deployment keeps outside either region.

Each home records its region, and the other's name, home and brokers (``REGIONS_FILE``), so the
processes it starts know their region (``Stack.region_env``) and ``stack down`` stops both.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from stack import mirror, processes
from stack.local import REGIONS_FILE, Stack, StackError, region_record, say, wait_healthy
from streams.runtime import kafka_config, settings
from streams.runtime.authority import Store
from streams.runtime.settings import Settings

NAMES = ("a", "b")


def standby_settings(s: Settings, offset: int | None = None) -> Settings:
    """Region b's settings from region a's: its own home and Kafka, Connect, API and worker
    ports ``offset`` above; PostgreSQL and SES are region a's (shared)."""
    off = offset if offset is not None else s.standby_port_offset
    return replace(s, home=s.home / "region-b", kafka_port=s.kafka_port + off,
                   controller_port=s.controller_port + off, connect_port=s.connect_port + off,
                   api_port=s.api_port + off, worker_web_port=s.worker_web_port + off,
                   worker_metrics_port=s.worker_metrics_port + off)


@dataclass
class Regions:
    """Both regions' stacks, from region a's settings."""

    a: Stack
    b: Stack

    @classmethod
    def of(cls, s: Settings) -> Regions:
        return cls(Stack(s), Stack(standby_settings(s)))

    def stack(self, name: str) -> Stack:
        if name not in NAMES:
            raise StackError("regions", f"no region {name!r}: the local stack has "
                             f"{' and '.join(NAMES)}")
        return self.a if name == "a" else self.b

    @property
    def authority(self) -> Store:
        return Store(self.a.s.authority_dsn)

    def record(self) -> None:
        """Each home's region record (read by ``Stack.region_env``)."""
        for me, peer in ((self.a, self.b), (self.b, self.a)):
            me.s.home.mkdir(parents=True, exist_ok=True)
            (me.s.home / REGIONS_FILE).write_text(json.dumps({
                "region": "a" if me is self.a else "b", "peer": "b" if me is self.a else "a",
                "peer_home": str(peer.s.home),
                "peer_bootstrap": f"{peer.s.host}:{peer.s.kafka_port}"}) + "\n")

    def up(self, workers: int = 1) -> None:
        """Region a's services, the authority (region a active, unless it has a row), region
        b's Kafka and Connect, MirrorMaker from the active region, then the active region's
        workers and API. Idempotent."""
        self.record()
        self.a.up(with_app=False)
        active = self.authority.initialise("a").active
        say(f"the authority: region {active} active")
        self.share_java_parts()
        self.b.start_kafka()
        self.b.prepare_topics()
        self.b.start_connect()
        source = self.stack(active)
        standby = self.b if source is self.a else self.a
        if not processes.alive(standby.pidfile("mirror")):
            self.start_mirror(source, standby)
        if source is self.a:
            self.a.start_apps(workers)
        say("both regions are up")

    def share_java_parts(self) -> None:
        """Region b runs region a's Kafka jars and Connect plugins (no second Maven run)."""
        self.b.s.home.mkdir(parents=True, exist_ok=True)
        for part in ("lib", "plugins"):
            link = self.b.s.home / part
            if not link.exists():
                link.symlink_to(self.a.s.home / part)

    def start_mirror(self, source: Stack, target: Stack) -> None:
        """MirrorMaker 2 in ``target``'s home, copying ``source``'s topics and group offsets."""
        names = {id(self.a): "a", id(self.b): "b"}
        src, dst = names[id(source)], names[id(target)]
        props = target.s.home / "mirror" / "mm2.properties"
        props.parent.mkdir(parents=True, exist_ok=True)
        security = kafka_config.KafkaSecurity.from_env(
            {**settings.environment(), **target.clients_kafka_env()})
        props.write_text(mirror.properties(src, dst, source.s.bootstrap, target.s.bootstrap,
                                           security.java_properties(), security.java_properties()))
        os.chmod(props, 0o600)  # a secure stack's holds the SASL password
        say(f"starting MirrorMaker 2 {src} -> {dst} (log: {target.log('mirror')})")
        processes.spawn(target.pidfile("mirror"), target.home.java(
            "mirror", "org.apache.kafka.connect.mirror.MirrorMaker", "512m", str(props),
            "--clusters", dst), target.log("mirror"))
        wait_healthy("mirror", lambda: processes.alive(target.pidfile("mirror")) is not None
                     and _log_says(target.log("mirror"), "MirrorSourceConnector"), 120,
                     target.log("mirror"), target.pidfile("mirror"))

    def stop_mirror(self) -> bool:
        """Stop whichever MirrorMaker runs (before a promotion: nothing of the old region lands
        in the copy after it)."""
        stopped = False
        for one in (self.a, self.b):
            stopped = processes.stop(one.pidfile("mirror"), timeout_s=30) or stopped
        return stopped

    def down(self) -> None:
        """Region b, then region a (its PostgreSQL last)."""
        self.b.down()
        self.a.down()

    def status(self) -> dict[str, dict[str, str]]:
        return {"a": self.a.status(), "b": self.b.status()}


def _log_says(log: Path, text: str) -> bool:
    try:
        return text in log.read_text(errors="replace")
    except OSError:
        return False


def of_home(s: Settings) -> Regions | None:
    """The two regions, if ``s``'s home is region a of a local two-region stack."""
    record = region_record(s.home)
    if record is None or record["region"] != "a":
        return None
    return Regions.of(s)
