"""SASL PLAIN over a plaintext connection is refused before any connection is made (issue 40):
PLAIN sends the password itself, so over SASL_PLAINTEXT anyone on the path reads it. The
process exits with one line naming the settings."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import free_port


def test_a_process_told_to_send_a_plain_password_in_clear_refuses_to_start(stack):
    env = {**os.environ, "CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
           "CRONSTREAM_KAFKA_SASL_MECHANISM": "PLAIN", "CRONSTREAM_KAFKA_SASL_USERNAME": "app",
           "CRONSTREAM_KAFKA_SASL_PASSWORD": "secret-in-clear"}
    for command in (["api", "--port", str(free_port())], ["worker"]):
        done = subprocess.run([sys.executable, "-m", "cli.main", *command], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode != 0, (command, done.stdout[-500:], done.stderr[-500:])
        said = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(said) == 1 and "PLAIN sends the password in clear" in said[0], (command, said)
        assert "secret-in-clear" not in done.stderr + done.stdout
