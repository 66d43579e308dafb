"""The SES client (``streams.adapters.ses``)."""




def test_ses_client_never_retries_by_itself(monkeypatch):
    # a retried SendEmail after a read timeout is a second email: botocore must make 1 attempt
    from streams.adapters import ses

    # credentials from the environment: without them boto3's chain asks the instance metadata
    # endpoint (169.254.169.254) as the client is made, and a unit test touches no network
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "unit")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "unit")

    client = ses.client(None, "us-east-1")
    assert client.meta.config.retries["total_max_attempts"] == 1
