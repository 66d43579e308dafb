"""The benchmarks' webhook receiver served over loopback to a real HTTP client (integration: a
socket; its parsing on raw bytes is unit-tested in tests/unit/bench/test_bench_receiver.py)."""

from __future__ import annotations

import asyncio

import httpx

from bench.receiver import Receiver


def test_a_real_client_over_loopback_with_keep_alive(tmp_path):
    with Receiver(out=tmp_path / "arrivals.txt") as receiver:
        async def send() -> list[int]:
            async with httpx.AsyncClient(limits=httpx.Limits(max_connections=4)) as client:
                responses = await asyncio.gather(*(
                    client.post(receiver.url, headers={"X-Cronstream-Fire-Id": f"j{i}@1"},
                                content=b"x" * i) for i in range(40)))
                responses.append(await client.post(receiver.url))  # no fire id
                return [response.status_code for response in responses]

        assert asyncio.run(send()) == [204] * 41
        assert receiver.count()[0] == 41
        assert len(receiver.dump().pairs) == 40  # dumped while it runs
        during = receiver.cpu_seconds()
        assert during > 0, "a process that started Python and served 41 requests used CPU"
        arrivals = receiver.stop()
    assert arrivals is not None
    assert sorted(fid for fid, _ in arrivals.pairs) == sorted(f"j{i}@1" for i in range(40))
    assert (arrivals.requests, arrivals.without_fire_id, arrivals.malformed) == (41, 1, 0)
    assert receiver.proc is not None and receiver.proc.returncode == 0
    assert receiver.final_cpu_s is not None and receiver.final_cpu_s >= during


def test_a_slow_receiver_answers_every_request_over_keep_alive(tmp_path):
    with Receiver(out=tmp_path / "arrivals.txt", delay_s=0.05) as receiver:
        async def send() -> list[int]:
            async with httpx.AsyncClient(limits=httpx.Limits(max_connections=2)) as client:
                responses = await asyncio.gather(*(
                    client.post(receiver.url_at(path), headers={"X-Cronstream-Fire-Id": f"j{i}@1"})
                    for i, path in enumerate(["/hook"] * 6 + ["/victim"] * 2)))
                return [response.status_code for response in responses]

        assert asyncio.run(send()) == [204] * 8
        assert receiver.count("/hook")[0] == 6
        assert receiver.count("/victim")[0] == 2
        assert receiver.count()[0] == 8
        arrivals = receiver.stop()
    assert arrivals is not None and len(arrivals.pairs) == 8
