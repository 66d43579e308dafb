"""A fire id runs once, and a zombie's fires are dropped: replay classification, the overlap
policy, targets (webhook, Kafka record, email) behind the SSRF guard, and the executor agent that
records each run's outcome on the ledger before it acknowledges the fired record."""
