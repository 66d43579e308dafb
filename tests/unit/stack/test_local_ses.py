"""``stack up`` runs and health-checks its own SES server only when the workers send to it
(issue 42, found by hand: pointed at another endpoint, ``stack up`` failed "ses: not healthy")."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from stack.local import Stack, ses_launcher
from streams.runtime import settings


@pytest.fixture
def stack(monkeypatch, tmp_path) -> Stack:
    monkeypatch.setenv("CRONSTREAM_HOME", str(tmp_path))
    monkeypatch.setenv("CRONSTREAM_SES_PORT", "18025")
    monkeypatch.delenv("CRONSTREAM_STACK_HOST", raising=False)
    return Stack(settings.load())


def test_pointed_elsewhere_the_local_server_is_neither_started_nor_checked(stack, monkeypatch,
                                                                            capsys):
    monkeypatch.setenv("CRONSTREAM_SES_ENDPOINT", "https://email.eu-west-1.amazonaws.com")
    monkeypatch.setenv("CRONSTREAM_SMS_ENDPOINT", "https://sms-voice.eu-west-1.amazonaws.com")
    monkeypatch.setattr(stack.ses, "start_ses", lambda: pytest.fail("the local SES server started"))
    stack.start_ses_if_local()
    out = capsys.readouterr().out
    assert "CRONSTREAM_SES_ENDPOINT=https://email.eu-west-1.amazonaws.com" in out
    assert "CRONSTREAM_SMS_ENDPOINT=https://sms-voice.eu-west-1.amazonaws.com" in out
    assert "not started" in out


def test_texts_sent_to_the_local_server_start_it_though_mail_goes_elsewhere(stack, monkeypatch,
                                                                           capsys):
    monkeypatch.setenv("CRONSTREAM_SES_ENDPOINT", "https://email.eu-west-1.amazonaws.com")
    monkeypatch.delenv("CRONSTREAM_SMS_ENDPOINT", raising=False)
    started = []
    monkeypatch.setattr(stack.ses, "start_ses", lambda: started.append(True))
    stack.start_ses_if_local()
    assert started == [True]
    assert "SES: the workers send to CRONSTREAM_SES_ENDPOINT=https://email" in capsys.readouterr().out


@pytest.mark.parametrize("endpoint", [None, "http://127.0.0.1:18025", "http://127.0.0.1:18025/"])
def test_when_it_is_the_endpoint_the_local_server_is_started(stack, monkeypatch, endpoint):
    monkeypatch.setenv("CRONSTREAM_SMS_ENDPOINT", "https://sms-voice.eu-west-1.amazonaws.com")
    if endpoint is None:
        monkeypatch.delenv("CRONSTREAM_SES_ENDPOINT", raising=False)
    else:
        monkeypatch.setenv("CRONSTREAM_SES_ENDPOINT", endpoint)
    started = []
    monkeypatch.setattr(stack.ses, "start_ses", lambda: started.append(True))
    stack.start_ses_if_local()
    assert started == [True]


def test_the_local_server_is_probed_at_its_own_port_whatever_the_endpoint(stack, monkeypatch):
    monkeypatch.setenv("CRONSTREAM_SES_ENDPOINT", "https://email.eu-west-1.amazonaws.com")
    probed = []
    monkeypatch.setattr(ses_launcher, "running_or_free", lambda *a, **k: False)
    monkeypatch.setattr(ses_launcher.processes, "spawn", lambda *a, **k: 1)
    monkeypatch.setattr(ses_launcher.processes, "alive", lambda pidfile: 1)
    monkeypatch.setattr(ses_launcher.httpx, "get", lambda url, timeout: probed.append(url)
                        or SimpleNamespace(status_code=200))
    stack.start_ses()
    assert probed == ["http://127.0.0.1:18025/_local/stats"]
