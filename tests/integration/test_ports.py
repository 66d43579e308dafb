"""A component's port is checked before it starts, and a start-up failure quotes its log.

A CI run's region b API "exited during start-up" on a port in the kernel's ephemeral range, and
its log went with the checkout: the check must see a port held as a connection's local end, and
the error must carry the log's last lines. Loopback only.
"""

import socket

from stack.local import StackError, port_taken, wait_healthy


def _listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def test_a_listened_port_is_taken():
    with _listener() as server:
        assert port_taken(server.getsockname()[1])


def test_a_port_held_by_an_outbound_connection_is_taken():
    """Nothing listens there, so a connect probe alone says free; a server's bind would fail."""
    with _listener() as server, socket.socket() as client:
        client.bind(("127.0.0.1", 0))
        client.connect(server.getsockname())
        held = client.getsockname()[1]
        assert port_taken(held)


def test_a_free_port_is_not_taken():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert not port_taken(port)


def test_a_process_that_exits_during_start_up_names_its_log_and_quotes_its_end(tmp_path):
    log = tmp_path / "api.log"
    log.write_text("".join(f"line {n}\n" for n in range(40)) + "OSError: [Errno 98] in use\n")
    pidfile = tmp_path / "api.pid"  # no pidfile: the process is gone
    try:
        wait_healthy("api", lambda: False, timeout_s=5, log=log, pidfile=pidfile)
    except StackError as err:
        text = str(err)
    else:
        raise AssertionError("no error for a process that exited")
    assert text.startswith(f"api: process exited during start-up (log: {log})")
    assert "OSError: [Errno 98] in use" in text and "line 29" in text
    assert "line 28" not in text  # the last twelve lines, not the whole log
