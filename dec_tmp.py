import time
from streams import cron, schedule
N=50000
ids=[f"scale-x-{i:07d}" for i in range(N)]
t=time.perf_counter()
for j in ids: cron.parse("H H 1 1 *", j)
print("parse us", (time.perf_counter()-t)/N*1e6)
s={"cron":"H H 1 1 *","timezone":"UTC"}
t=time.perf_counter()
for j in ids: schedule.next_after(s, j, 1795462190000)
print("next_after (cold) us", (time.perf_counter()-t)/N*1e6)
