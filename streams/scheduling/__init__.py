"""Every slot gets exactly one decision: cron math, schedules, misfire and catch-up policies, the
due and warm indexes, progress marks, the fired tail read at a takeover, the reconciler (the
"cleanup crew") and the schedule-stream agent that emits fired records and ledger decisions."""
