"""The local stack: Kafka (KRaft), Kafka Connect, PostgreSQL and the app processes, no Docker."""
