"""The SES client (``streams.adapters.ses``)."""




def test_ses_client_never_retries_by_itself():
    # a retried SendEmail after a read timeout is a second email: botocore must make 1 attempt
    from streams.adapters import ses

    client = ses.client()
    assert client.meta.config.retries["total_max_attempts"] == 1
