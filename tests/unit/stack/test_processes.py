import subprocess
import sys

from stack import processes


def test_spawn_alive_stop(tmp_path):
    pidfile, log = tmp_path / "p.pid", tmp_path / "p.log"
    pid = processes.spawn(pidfile, [sys.executable, "-c", "import time; print('hi', flush=True); "
                                    "time.sleep(60)"], log)
    assert processes.alive(pidfile) == pid
    assert processes.stop(pidfile, timeout_s=5)
    assert processes.alive(pidfile) is None and not pidfile.exists()
    assert processes.stop(pidfile) is False


def test_a_recycled_pid_is_never_ours(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pidfile = tmp_path / "p.pid"
        pidfile.write_text(f"{other.pid} 1\n")  # right pid, wrong start time
        assert processes.alive(pidfile) is None
        assert processes.stop(pidfile) is False
        assert other.poll() is None, "a process we did not start must not be signalled"
    finally:
        other.kill()
        other.wait()


def test_a_process_gone_between_two_looks_is_not_alive_and_no_error(tmp_path, monkeypatch):
    """``stop`` polls ``alive`` while the process it signalled exits: gone between alive's two
    reads of ``/proc/<pid>/stat``, it raised FileNotFoundError, and ``stack down`` stopped before
    PostgreSQL (the likely way a two-host test run left its server running, 2026-11-28)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    pidfile = tmp_path / "p.pid"
    processes.write(pidfile, proc.pid)
    started = processes._start_time(proc.pid)
    proc.kill()
    proc.wait()  # gone and reaped
    monkeypatch.setattr(processes, "_start_time", lambda pid: started)  # the first look saw it
    assert processes.alive(pidfile) is None


def test_kafka_cluster_ids_never_look_like_an_option(monkeypatch):
    """kafka-storage format -t <id> fails on an id starting with "-" (1 in 64 of random ids)."""
    import uuid

    from stack.local import kafka_nodes

    dash_first = uuid.UUID(bytes=b"\xfb" + bytes(15))  # base64url of 0xfb... starts with "-"
    ids = iter([dash_first, uuid.UUID(int=1)])
    monkeypatch.setattr(kafka_nodes.uuid, "uuid4", lambda: next(ids))
    cluster_id = kafka_nodes.kafka_cluster_id()
    assert not cluster_id.startswith("-") and len(cluster_id) == 22


def test_postgres_that_does_not_answer_is_not_healthy(monkeypatch):
    """After a machine restart ``postmaster.pid`` outlived its server and ``stack up`` crashed
    on the refused connection instead of starting PostgreSQL."""
    import socket

    from stack.local import Stack
    from streams.runtime import settings

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    monkeypatch.setenv("CRONSTREAM_PG_PORT", str(port))
    stack = Stack(settings.load())
    assert stack.postgres_healthy() is False
    assert stack.status()["postgres"] == "stopped"


def test_kafka_probe_says_no_for_a_port_that_is_not_kafka():
    """The broker probe runs in a child process (librdkafka aborted the test process inside
    it during a broker restart); something that is not Kafka on the port is not healthy."""
    import socket

    from stack.local import kafka_lists_a_broker

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert kafka_lists_a_broker(f"127.0.0.1:{server.getsockname()[1]}", timeout_s=1) is False


def test_a_call_in_a_child_returns_its_result_and_survives_its_abort():
    """``stack.isolated`` is how the stack talks to Kafka from a long-lived process: the
    result comes back as JSON, and a child that aborts (as librdkafka does) is an error of the
    call, not the death of the caller."""
    import pytest

    from stack import isolated

    assert isolated.call("os.path:join", "a", "b", timeout_s=60) == "a/b"
    with pytest.raises(isolated.ChildCallFailed, match=r"os:abort failed \(exit code -6\)"):
        isolated.call("os:abort", timeout_s=60)
    with pytest.raises(isolated.ChildCallFailed, match="ZeroDivisionError"):
        isolated.call("operator:truediv", 1, 0, timeout_s=60)


def test_the_stack_waits_for_the_api_as_long_as_its_first_catch_up_may_take(monkeypatch):
    """The API reads the whole jobs topic on a first start (15 s per million jobs): the 60 s the
    stack gives other components would call a healthy API with 5M jobs failed."""
    from stack.local import Stack
    from streams.runtime import settings
    from streams.runtime.settings import API_START_S

    seen = {}
    stack = Stack(settings.load())
    monkeypatch.setattr(stack.apps, "start_app", lambda name, args, health=None, env=None,
                        ready_timeout_s=60, wrap=None: seen.update(name=name, timeout=ready_timeout_s) or 1)
    stack.start_api()
    assert seen["name"] == "api" and seen["timeout"] >= API_START_S, seen
