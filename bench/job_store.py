"""The API's job store alone: how fast an import's batches are written to it (``JobStore.put_many``:
the records, their facets, labels and counts, in one SQLite transaction a batch).

    .venv/bin/python -m bench.job_store                       # 200,000 jobs, batches of 5,000
    .venv/bin/python -m bench.job_store --jobs 1000000 --batch 1000

No stack: a store file in a temporary directory, deleted after. Why a benchmark of its own: the
store is what bounds ``POST /v1/job-imports`` on the API's one core (bench.churn), and its
settings (page cache, checkpoint interval, batch size) are cheaper to compare here.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from api.job_store import JobStore
from api.models import JobIn, job_record
from api.routes.job_imports import fresh_ids
from bench.common import count_at_least, report
from streams.runtime.codec import codec

JOB = {"schedule": {"cron": "0 0 1 1 *"}, "target": {"type": "kafka", "topic": "bench.never"},
       "labels": {"bench": "store"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=count_at_least(1), default=200_000)
    parser.add_argument("--batch", type=count_at_least(1), default=5_000)
    args = parser.parse_args()
    body, now, encode = JobIn.model_validate(JOB), int(time.time() * 1000), codec().encode
    records = [(job_id, encode("Job", job_record(body, job_id=job_id, tenant="bench", revision=1,
                                                 created_ms=now, updated_ms=now, request_hash="")))
               for job_id in fresh_ids(args.jobs)]
    with tempfile.TemporaryDirectory() as home:
        store = JobStore(Path(home) / "jobs.sqlite3")
        started, cpu = time.perf_counter(), time.process_time()
        for at in range(0, args.jobs, args.batch):
            store.put_many(records[at:at + args.batch])
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        size = sum(f.stat().st_size for f in Path(home).iterdir())
        store.close()
    report("job_store", {"jobs/s written": round(args.jobs / wall),
                         "CPU µs a job": round(cpu / args.jobs * 1e6, 1),
                         "store on disk MiB": round(size / 2**20, 1)}, vars(args))


if __name__ == "__main__":
    main()
