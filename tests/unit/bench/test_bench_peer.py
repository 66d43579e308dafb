import re

from bench import peer


def test_the_due_time_leaves_room_to_insert_the_tasks_and_start_the_instances():
    due = peer.plan_due(1_800_000_000.2, 50_000)
    assert due == 1_800_000_000 + 50_000 // peer.SCHEDULE_RATE + peer.DUE_MARGIN_S + 1  # whole second
    assert peer.plan_due(1_800_000_000.0, 0) == 1_800_000_000 + peer.DUE_MARGIN_S


def test_spike_ids_are_the_ones_the_java_side_writes():
    assert peer.spike_ids("peer-abc123", 3) == ["peer-abc123-0000000", "peer-abc123-0000001",
                                               "peer-abc123-0000002"]
    main = (peer.PEER_DIR / "src" / "main" / "java" / "io" / "cronstream" / "peer" / "Main.java").read_text()
    assert 'insert(client, task, prefix + "-", jobs, due, batch)' in main
    assert 'String.format("%s%07d", idPrefix, i)' in main


def test_the_printed_db_scheduler_version_is_the_one_built():
    pom = (peer.PEER_DIR / "pom.xml").read_text()
    assert re.search(r"<db-scheduler.version>(.+?)</db-scheduler.version>", pom).group(1) == peer.DB_SCHEDULER
