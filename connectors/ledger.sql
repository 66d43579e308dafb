-- The Postgres side of the ledger sinks (applied by `register_sink`, idempotent).
--
-- Table ledger: one row per job slot (sink cronstream-ledger-sink, upsert on record_id) and one
-- per campaign recipient. The recipients' rows are not sunk one by one: the fan-out records one
-- RecipientOutcomes record per chunk of up to 50 (schemas/recipient_outcomes.avsc), the sink
-- cronstream-recipient-outcomes-sink upserts it into recipient_outcomes, and the trigger below
-- turns it into the chunk's ledger rows (record_id campaign_id:email, newest wins) and keeps
-- nothing in recipient_outcomes: it is a staging table, the ledger is the record.
--
-- Newest wins only if each sink applies a key's records in their topic order. A chunk is
-- recorded again after a crash or a rebalance ('sent', then 'unknown' by the next owner that
-- found it at intent), a slot is recorded again when it runs again, and a sink replaying after
-- a broker restart reads both records in one batch. Debezium 3.0.7's reduction buffer
-- (use.reduction.buffer) keys a batch by the whole record in primary.key.mode record_value, not
-- by the key fields (DBZ-8593, fixed upstream after 3.0.7): two records of one key are both
-- kept and written in hash order, so the older won half the time (the fault suite's broker
-- restart: 200 addresses 'unknown' on the topic, 'sent' here), and where the table keeps the
-- rows the batch's multi-row upsert naming one key twice failed ("ON CONFLICT DO UPDATE command
-- cannot affect row a second time") and stopped the sink for good. So no sink uses it:
-- recipient_outcomes keeps its multi-row inserts (reWriteBatchedInserts), whose rows fire the
-- trigger below in order and are never kept, so one key twice is no conflict; the ledger and
-- ses_feedback sinks write one statement a record (their URL turns reWriteBatchedInserts off).
-- Revisit with the upgrade.
-- Column types are those the Debezium JDBC sink derives from the Avro schemas.

-- One transaction, however the file is applied (psql -f too): campaign_counts' backfill below
-- counts what the ledger holds while its locks keep the sinks out, and the triggers' new
-- functions go live with the table they write to.
BEGIN;

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
    email        text,
    channel      text
);
-- a table made before the ledger's channel field (schemas/history/ledger.2.avsc)
ALTER TABLE ledger ADD COLUMN IF NOT EXISTS channel text;

-- A job's slots, newest first, one page at a time (GET /v1/jobs/{id}/runs, the console's job
-- page): without it that query read the whole table, 318 ms a page beside a million other rows
-- (bench/console.py). Partial: the campaign recipients' rows, most of the table's writes during a
-- fan-out, are neither indexed nor slowed by it.
CREATE INDEX IF NOT EXISTS ledger_job_slots ON ledger (tenant, job_id, nominal_time DESC)
    WHERE kind = 'job';

-- A campaign's recipients recorded unknown, in address order (GET /v1/campaigns/{id}/unknown):
-- without it each page read the whole ledger. Partial, so it holds only those few rows; a
-- recipient an SES event resolves to sent leaves it.
CREATE INDEX IF NOT EXISTS ledger_unknown_recipients ON ledger (tenant, campaign_id, email)
    WHERE kind = 'campaign' AND outcome = 'unknown';

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

-- A chunk record's recipients, one row per address: an address twice in one chunk keeps its
-- last outcome.
CREATE OR REPLACE FUNCTION cronstream_chunk_rows(campaign text, email_list text[],
                                                 outcome_list text[], reason_list text[],
                                                 message_id_list text[], attempt_list integer[])
RETURNS TABLE (record_id text, email text, outcome text, reason text, message_id text,
               attempts integer)
LANGUAGE sql IMMUTABLE AS $$
    SELECT DISTINCT ON (r.address)
           campaign || ':' || r.address, r.address, r.what, NULLIF(r.why, ''),
           NULLIF(r.ses_id, ''), r.tries
      FROM unnest(email_list, outcome_list, reason_list, message_id_list, attempt_list)
           WITH ORDINALITY AS r(address, what, why, ses_id, tries, n)
     ORDER BY r.address, r.n DESC
$$;

CREATE OR REPLACE FUNCTION cronstream_recipient_outcomes_to_ledger() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bucket bigint := floor(EXTRACT(EPOCH FROM now()))::bigint;
    lateness bigint := GREATEST(0, (EXTRACT(EPOCH FROM NEW.completed_at - NEW.nominal_time)
                                    * 1000)::bigint);
    inserted integer;
    recipients integer;
BEGIN
    -- 1. a chunk recorded for the first time, nearly every one: its rows inserted and counted,
    -- with no read of the ledger beyond the insert's own key checks
    WITH written AS (
        INSERT INTO ledger (record_id, kind, tenant, job_id, fire_id, nominal_time, decision,
                            reason, lateness_ms, epoch, attempts, outcome, completed_at,
                            message_id, campaign_id, email, channel)
        SELECT c.record_id, 'campaign', NEW.tenant, 'campaign-' || NEW.campaign_id, NEW.fire_id,
               NEW.nominal_time, 'campaign_send', c.reason, lateness, NEW.epoch, c.attempts,
               c.outcome, NEW.completed_at, c.message_id, NEW.campaign_id, c.email, 'email'
          FROM cronstream_chunk_rows(NEW.campaign_id, NEW.emails, NEW.outcomes, NEW.reasons,
                                     NEW.message_ids, NEW.attempts) AS c
        ON CONFLICT (record_id) DO NOTHING
        RETURNING outcome
    ), counted AS (
        INSERT INTO campaign_counts AS k (tenant, campaign_id, outcome, at_second, n)
        SELECT NEW.tenant, NEW.campaign_id, outcome, bucket, count(*)
          FROM written GROUP BY outcome
         ORDER BY outcome  -- bucket rows locked in one order
        ON CONFLICT (tenant, campaign_id, outcome, at_second) DO UPDATE SET n = k.n + EXCLUDED.n
    )
    SELECT count(*) INTO inserted FROM written;
    SELECT count(DISTINCT e) INTO recipients FROM unnest(NEW.emails) AS e;
    IF inserted = recipients THEN
        RETURN NULL;  -- BEFORE trigger: the chunk itself is not kept
    END IF;
    -- 2. a chunk recorded again (found at intent after a crash, or its unknown recipients
    -- resolved by SES's events): newest wins, and each row that was there moves from its old
    -- outcome's count to its new one (a row step 1 just inserted is rewritten as it is: no
    -- move). Both parts of one statement see the rows as they were before it.
    WITH chunk AS (
        SELECT * FROM cronstream_chunk_rows(NEW.campaign_id, NEW.emails, NEW.outcomes,
                                            NEW.reasons, NEW.message_ids, NEW.attempts)
    ), before AS (
        SELECT l.outcome FROM ledger l JOIN chunk c ON l.record_id = c.record_id
    ), updated AS (
        UPDATE ledger l SET fire_id = NEW.fire_id, nominal_time = NEW.nominal_time,
               reason = c.reason, lateness_ms = lateness, epoch = NEW.epoch,
               attempts = c.attempts, outcome = c.outcome, completed_at = NEW.completed_at,
               message_id = c.message_id
          FROM chunk c WHERE l.record_id = c.record_id
        RETURNING l.outcome
    )
    INSERT INTO campaign_counts AS k (tenant, campaign_id, outcome, at_second, n)
    SELECT NEW.tenant, NEW.campaign_id, moved.outcome, bucket, sum(moved.n)
      FROM (SELECT outcome, 1 AS n FROM updated
            UNION ALL SELECT outcome, -1 FROM before) AS moved
     GROUP BY moved.outcome HAVING sum(moved.n) <> 0
     ORDER BY moved.outcome
    ON CONFLICT (tenant, campaign_id, outcome, at_second) DO UPDATE SET n = k.n + EXCLUDED.n;
    RETURN NULL;
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

-- The delivery count an SES event adds to: each recipient once per kind however often SNS
-- delivered the event, since the sink upserts on (message id, email, type): a row inserted
-- adds one, a row upserted again moves its one only if what it counts as changed (an upsert
-- that updates fires the UPDATE triggers, not the INSERT ones).
CREATE OR REPLACE FUNCTION cronstream_delivery_count(event_type text, bounce_type text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE event_type WHEN 'Delivery' THEN 'delivered' WHEN 'Complaint' THEN 'complained'
                           WHEN 'Bounce' THEN CASE bounce_type WHEN 'Permanent' THEN 'bounced' END
           END
$$;

CREATE OR REPLACE FUNCTION cronstream_ses_feedback_to_counts() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    counted_as text := cronstream_delivery_count(NEW.event_type, NEW.bounce_type);
    was text;
BEGIN
    IF TG_OP = 'UPDATE' THEN  -- an event upserted again: counted once, moved if it changed
        was := cronstream_delivery_count(OLD.event_type, OLD.bounce_type);
        IF was IS NOT DISTINCT FROM counted_as AND OLD.campaign_id IS NOT DISTINCT FROM
                NEW.campaign_id AND OLD.tenant = NEW.tenant THEN
            RETURN NULL;
        END IF;
        IF was IS NOT NULL AND OLD.campaign_id IS NOT NULL THEN
            UPDATE campaign_counts SET n = n - 1
             WHERE tenant = OLD.tenant AND campaign_id = OLD.campaign_id AND outcome = was
               AND at_second = 0;
        END IF;
    END IF;
    IF counted_as IS NOT NULL AND NEW.campaign_id IS NOT NULL THEN
        INSERT INTO campaign_counts AS k (tenant, campaign_id, outcome, at_second, n)
        VALUES (NEW.tenant, NEW.campaign_id, counted_as, 0, 1)
        ON CONFLICT (tenant, campaign_id, outcome, at_second) DO UPDATE SET n = k.n + 1;
    END IF;
    RETURN NULL;
END
$$;

-- Table campaign_counts: how many of a campaign's recipients have each outcome, kept by the
-- recipient_outcomes trigger as it writes their ledger rows, in buckets of the second they were
-- written (the last ten seconds' buckets give the rate the pending count falls at; bucketed by
-- completed_at it read 0/s for most of a 1M send, whose rows reach the ledger over 10 s after
-- they complete); and how many SES said were delivered, bounced (hard) or complained, kept by
-- ses_feedback's trigger (bucket 0). A campaign's page and its progress poll read these few rows
-- instead of counting the campaign's ledger and feedback rows at each load: at 1M recipients
-- that count was a sequential scan of the ledger, a second per load by the end of the send, and
-- two loads a second halved the send's rate (docs/performance.md, "Campaign page during a
-- send"). A recipient whose outcome changes (its chunk recorded again) moves from its old
-- outcome's count to its new one in the current bucket. One writer per trigger (each sink's
-- tasks.max 1): with more, two chunks' transactions could take the bucket rows' locks in
-- opposite orders.
DO $$
BEGIN
    IF to_regclass('campaign_counts') IS NULL THEN
        CREATE TABLE campaign_counts (
            tenant      text NOT NULL,
            campaign_id text NOT NULL,
            outcome     text NOT NULL,
            at_second   bigint NOT NULL,  -- epoch second the rows were written
            n           bigint NOT NULL,
            PRIMARY KEY (tenant, campaign_id, outcome, at_second)
        );
        -- a ledger from before this table: its campaign rows counted once (bucketed by
        -- completed_at, long past anyway). The locks hold the sinks until this transaction
        -- commits, with the triggers' new functions: no row is written uncounted meanwhile
        LOCK TABLE ledger IN SHARE MODE;
        INSERT INTO campaign_counts
        SELECT tenant, campaign_id, outcome,
               COALESCE(floor(EXTRACT(EPOCH FROM completed_at))::bigint, 0), count(*)
          FROM ledger WHERE kind = 'campaign' AND campaign_id IS NOT NULL
         GROUP BY 1, 2, 3, 4;
        LOCK TABLE ses_feedback IN SHARE MODE;
        INSERT INTO campaign_counts
        SELECT tenant, campaign_id, counted_as, 0, count(*)  -- as the trigger counts
          FROM (SELECT tenant, campaign_id,
                       cronstream_delivery_count(event_type, bounce_type) AS counted_as
                  FROM ses_feedback WHERE campaign_id IS NOT NULL) AS f
         WHERE counted_as IS NOT NULL
         GROUP BY 1, 2, 3;
    END IF;
END
$$;

CREATE OR REPLACE TRIGGER ses_feedback_to_counts
    AFTER INSERT OR UPDATE ON ses_feedback
    FOR EACH ROW EXECUTE FUNCTION cronstream_ses_feedback_to_counts();

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

COMMIT;
