-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Durable jobs (docs/durable.md):
--
--   - jobfence_steps: each step a job's handler ran to success
--     (jobfence.Step), and the timers of its sleeps and signal waits,
--     recorded under the fence of the attempt that ran it: a later
--     attempt replays the output instead of running the step again. The
--     primary key makes a step recorded once whatever the attempts.
--   - jobfence_signals: the signals sent to a job (Client.Signal), each
--     delivered to one wait (AwaitSignal) at most, oldest first; one sent
--     before the wait waits for it. The partial index holds only the
--     undelivered ones, which the promoter's sweep reads each second.
--   - jobfence_jobs.awaiting: the signal a scheduled job waits for; NULL
--     for every other job, so adding it rewrites nothing.
--
-- New tables that no one else sees yet: creating them locks nothing of
-- the fleet's.
CREATE TABLE IF NOT EXISTS jobfence_steps (
    job_id      bigint      NOT NULL,
    name        text        NOT NULL,
    output      jsonb       NOT NULL,
    fence       bigint      NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, name)
);
CREATE TABLE IF NOT EXISTS jobfence_signals (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id       bigint      NOT NULL,
    name         text        NOT NULL,
    payload      jsonb       NOT NULL DEFAULT 'null',
    sent_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz,
    delivered_to text
);
CREATE INDEX IF NOT EXISTS jobfence_signals_undelivered ON jobfence_signals (job_id, name, id)
    WHERE delivered_at IS NULL;
CREATE INDEX IF NOT EXISTS jobfence_signals_job ON jobfence_signals (job_id);
ALTER TABLE jobfence_jobs ADD COLUMN IF NOT EXISTS awaiting text;
ALTER TABLE jobfence_jobs_finished ADD COLUMN IF NOT EXISTS awaiting text;

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Refused while a job waits for a signal: the release before this
-- migration would wake it only at its timeout, its steps forgotten.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM jobfence_jobs WHERE awaiting IS NOT NULL AND state = 'scheduled')
       OR (to_regclass('jobfence_steps') IS NOT NULL AND EXISTS (
           SELECT FROM jobfence_steps s JOIN jobfence_jobs j ON j.id = s.job_id
           WHERE j.state NOT IN ('completed', 'discarded', 'cancelled'))) THEN
        RAISE EXCEPTION 'jobfence: durable jobs (steps, sleeps, signal waits) have not finished: let this release''s workers finish them, then migrate down';
    END IF;
END $$;
-- +goose StatementEnd
ALTER TABLE jobfence_jobs DROP COLUMN IF EXISTS awaiting;
ALTER TABLE jobfence_jobs_finished DROP COLUMN IF EXISTS awaiting;
DROP TABLE IF EXISTS jobfence_signals;
DROP TABLE IF EXISTS jobfence_steps;
