"""The outside world cronstream talks to besides Kafka: Amazon SES (boto3 over HTTP) and tenants'
API keys. Above the runtime, below every guarantee that uses them."""
