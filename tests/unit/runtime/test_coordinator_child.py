"""Requests made from a child process: an abort or a hang there costs a call, never the caller
(streams.runtime.coordinator_child). The targets are functions of this module, run in the child."""

from __future__ import annotations

import os
import time

import pytest

from streams.runtime.coordinator_child import AdminChild, ChildFailed

HERE = __name__


def double(n: int) -> dict[str, int]:
    return {"twice": 2 * n, "pid": os.getpid()}


def refuse(why: str) -> None:
    raise LookupError(why)


def abort() -> None:
    os.abort()  # what librdkafka's failed assertion does to the process


def hang(seconds: float) -> None:
    time.sleep(seconds)


def test_a_call_runs_in_one_child_that_stays() -> None:
    child = AdminChild()
    first, second = child.call(f"{HERE}:double", 2, timeout_s=30), \
        child.call(f"{HERE}:double", 5, timeout_s=30)
    assert (first["twice"], second["twice"]) == (4, 10)
    assert first["pid"] == second["pid"] != os.getpid()
    assert child.started == 1


def test_an_error_of_the_request_is_raised_and_the_child_kept() -> None:
    child = AdminChild()
    with pytest.raises(ChildFailed, match="LookupError: coordinator loading"):
        child.call(f"{HERE}:refuse", "coordinator loading", timeout_s=30)
    assert child.call(f"{HERE}:double", 1, timeout_s=30)["twice"] == 2
    assert child.started == 1


def test_an_abort_costs_the_call_and_the_next_one_gets_a_new_child() -> None:
    child = AdminChild()
    before = child.call(f"{HERE}:double", 1, timeout_s=30)["pid"]
    with pytest.raises(ChildFailed, match="no answer from the child"):
        child.call(f"{HERE}:abort", timeout_s=30)
    after = child.call(f"{HERE}:double", 1, timeout_s=30)["pid"]
    assert after != before and child.started == 2


def test_a_child_that_does_not_answer_in_time_is_killed_and_replaced() -> None:
    child = AdminChild()
    stuck = child.call(f"{HERE}:double", 1, timeout_s=30)["pid"]
    with pytest.raises(ChildFailed, match="no answer within"):
        child.call(f"{HERE}:hang", 60, timeout_s=0.5)
    with pytest.raises(ProcessLookupError):
        os.kill(stuck, 0)  # killed and reaped, not left running
    assert child.call(f"{HERE}:double", 3, timeout_s=30)["twice"] == 6
    assert child.started == 2


def test_a_child_that_died_between_calls_is_reaped_and_its_pipes_closed() -> None:
    child = AdminChild()
    dead = child.call(f"{HERE}:double", 1, timeout_s=30)["pid"]
    old = child._child  # noqa: SLF001
    assert old is not None and old.stdin is not None and old.stdout is not None
    os.kill(dead, 9)
    old.wait()  # dead before the next call, not during it
    assert child.call(f"{HERE}:double", 4, timeout_s=30)["twice"] == 8
    assert old.stdin.closed and old.stdout.closed
    assert child.started == 2
