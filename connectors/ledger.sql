-- The Postgres side of the ledger sinks (applied by `register_sink`, idempotent).
--
-- Table ledger: one row per job slot (sink cronstream-ledger-sink, upsert on record_id) and one
-- per campaign recipient. The recipients' rows are not sunk one by one: the fan-out records one
-- RecipientOutcomes record per chunk of up to 50 (schemas/recipient_outcomes.avsc), the sink
-- cronstream-recipient-outcomes-sink upserts it into recipient_outcomes, and the trigger below
-- turns it into the chunk's ledger rows (record_id campaign_id:email, newest wins) and keeps
-- nothing in recipient_outcomes: it is a staging table, the ledger is the record.
-- Column types are those the Debezium JDBC sink derives from the Avro schemas.

CREATE TABLE IF NOT EXISTS ledger (
    record_id    text PRIMARY KEY,
    kind         text NOT NULL,
    tenant       text NOT NULL,
    job_id       text NOT NULL,
    fire_id      text NOT NULL,
    nominal_time timestamp(6) NOT NULL,
    decision     text NOT NULL,
    reason       text,
    lateness_ms  bigint NOT NULL,
    epoch        integer NOT NULL,
    attempts     integer NOT NULL,
    outcome      text NOT NULL,
    status_code  integer,
    error        text,
    fired_at     timestamp(6),
    completed_at timestamp(6),
    message_id   text,
    campaign_id  text,
    email        text
);

-- A job's slots, newest first, one page at a time (GET /v1/jobs/{id}/runs, the console's job
-- page): without it that query read the whole table, 318 ms a page beside a million other rows
-- (bench/console.py). Partial: the campaign recipients' rows, most of the table's writes during a
-- fan-out, are neither indexed nor slowed by it.
CREATE INDEX IF NOT EXISTS ledger_job_slots ON ledger (tenant, job_id, nominal_time DESC)
    WHERE kind = 'job';

CREATE TABLE IF NOT EXISTS recipient_outcomes (
    chunk_id     text PRIMARY KEY,
    tenant       text NOT NULL,
    campaign_id  text NOT NULL,
    fire_id      text NOT NULL,
    nominal_time timestamp(6) NOT NULL,
    epoch        integer NOT NULL,
    completed_at timestamp(6) NOT NULL,
    emails       text[] NOT NULL,
    outcomes     text[] NOT NULL,
    reasons      text[] NOT NULL,
    message_ids  text[] NOT NULL,
    attempts     integer[] NOT NULL
);

CREATE OR REPLACE FUNCTION cronstream_recipient_outcomes_to_ledger() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ledger (record_id, kind, tenant, job_id, fire_id, nominal_time, decision, reason,
                        lateness_ms, epoch, attempts, outcome, completed_at, message_id,
                        campaign_id, email)
    SELECT DISTINCT ON (r.email)  -- an address twice in one chunk: its last outcome wins
           NEW.campaign_id || ':' || r.email, 'campaign', NEW.tenant,
           'campaign-' || NEW.campaign_id, NEW.fire_id, NEW.nominal_time, 'campaign_send',
           NULLIF(r.reason, ''),
           GREATEST(0, (EXTRACT(EPOCH FROM NEW.completed_at - NEW.nominal_time) * 1000)::bigint),
           NEW.epoch, r.attempts, r.outcome, NEW.completed_at, NULLIF(r.message_id, ''),
           NEW.campaign_id, r.email
      FROM unnest(NEW.emails, NEW.outcomes, NEW.reasons, NEW.message_ids, NEW.attempts)
           WITH ORDINALITY AS r(email, outcome, reason, message_id, attempts, n)
     ORDER BY r.email, r.n DESC
    ON CONFLICT (record_id) DO UPDATE SET
           fire_id = EXCLUDED.fire_id, nominal_time = EXCLUDED.nominal_time,
           reason = EXCLUDED.reason, lateness_ms = EXCLUDED.lateness_ms, epoch = EXCLUDED.epoch,
           attempts = EXCLUDED.attempts, outcome = EXCLUDED.outcome,
           completed_at = EXCLUDED.completed_at, message_id = EXCLUDED.message_id;
    RETURN NULL;  -- BEFORE trigger: the chunk itself is not kept
END
$$;

CREATE OR REPLACE TRIGGER recipient_outcomes_to_ledger
    BEFORE INSERT OR UPDATE ON recipient_outcomes
    FOR EACH ROW EXECUTE FUNCTION cronstream_recipient_outcomes_to_ledger();

-- Table ses_feedback: every SES event of every recipient (sink cronstream-ses-feedback-sink from
-- cronstream.ses-feedback, schemas/ses_feedback.avsc), upserted on (ses_message_id, email,
-- event_type), so an event SNS delivered twice is one row. Kept beside the ledger, not folded
-- into it: an event may arrive before the recipient's ledger row does (SES answers the send,
-- then the outcomes are sunk), and a join at read time cannot lose that race. The raw event is
-- not sunk (field.exclude.list): at a 50M-recipient campaign's two or three events per recipient
-- it would be most of the table; the topic keeps it for audit.
CREATE TABLE IF NOT EXISTS ses_feedback (
    tenant            text NOT NULL,
    email             text NOT NULL,
    event_type        text NOT NULL,
    bounce_type       text,
    bounce_subtype    text,
    complaint_type    text,
    delay_type        text,
    diagnostic        text,
    ses_message_id    text NOT NULL,
    feedback_id       text,
    event_ms          bigint NOT NULL,
    configuration_set text,
    campaign_id       text,
    chunk             text,
    sns_message_id    text NOT NULL,
    sns_topic_arn     text NOT NULL,
    received_ms       bigint NOT NULL,
    PRIMARY KEY (ses_message_id, email, event_type)
);
CREATE INDEX IF NOT EXISTS ses_feedback_campaign ON ses_feedback (tenant, campaign_id, email);

-- A campaign recipient's delivery status: the furthest its SES events went, complaint over a
-- hard bounce over a soft one or a reject over delivery over a delay over the send, and when.
CREATE OR REPLACE VIEW campaign_delivery AS
SELECT DISTINCT ON (tenant, campaign_id, email)
       tenant, campaign_id, email, ses_message_id, feedback_id, diagnostic,
       CASE event_type WHEN 'Complaint' THEN 'complained'
                       WHEN 'Bounce' THEN CASE bounce_type WHEN 'Permanent' THEN 'bounced'
                                                           ELSE 'soft_bounced' END
                       WHEN 'Reject' THEN 'rejected' WHEN 'Delivery' THEN 'delivered'
                       WHEN 'DeliveryDelay' THEN 'delayed' ELSE 'accepted' END AS delivery_status,
       to_timestamp(event_ms / 1000.0) AT TIME ZONE 'UTC' AS delivery_at
  FROM ses_feedback
 WHERE campaign_id IS NOT NULL
   AND event_type IN ('Send', 'Delivery', 'DeliveryDelay', 'Bounce', 'Complaint', 'Reject')
 ORDER BY tenant, campaign_id, email,
          CASE event_type WHEN 'Complaint' THEN 6
                          WHEN 'Bounce' THEN CASE bounce_type WHEN 'Permanent' THEN 5 ELSE 4 END
                          WHEN 'Reject' THEN 4 WHEN 'Delivery' THEN 3
                          WHEN 'DeliveryDelay' THEN 2 ELSE 1 END DESC,
          event_ms DESC;
