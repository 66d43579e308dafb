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
