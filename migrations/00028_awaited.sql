-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Awaiting a job's result (Client.Wait, jobfence.Result, workflow.Wait;
-- docs/durable.md). awaited is set by a waiter before it reads the job,
-- and the triggers below NOTIFY jobfence_done when such a job ends (its
-- state turns completed, discarded or cancelled) or its row leaves the
-- jobs table (a completion's move to jobfence_jobs_finished, a delete):
-- the payload is the job's ID, and for a workflow task also
-- 'w' || its workflow's ID.
--
-- Only awaited jobs notify. A NOTIFY in a transaction makes its commit
-- take PostgreSQL's notify lock, which every notifying commit of the
-- server takes in turn (docs/benchmarks/code.md): notifying every
-- completion would serialise the fleet's commits. The triggers' WHEN
-- reads only the row, so a job nobody awaits costs each completion a test
-- of a column, and no function call, no NOTIFY (docs/benchmarks/await.md).
-- A waiter that cannot LISTEN (PgBouncer in transaction mode without a
-- ListenURL, PollOnly) polls instead; the flag then only costs the
-- NOTIFYs nobody hears.
--
-- Nullable without a default, NULL for every job nobody awaits: adding it
-- rewrites nothing. The finished table has it too: a move copies it.
ALTER TABLE jobfence_jobs ADD COLUMN IF NOT EXISTS awaited boolean;
ALTER TABLE jobfence_jobs_finished ADD COLUMN IF NOT EXISTS awaited boolean;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobfence_notify_awaited() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD;
    ELSE
        r := NEW;
    END IF;
    PERFORM pg_notify('jobfence_done', r.id::text);
    IF r.workflow_id IS NOT NULL THEN
        PERFORM pg_notify('jobfence_done', 'w' || r.workflow_id::text);
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
-- Creating a trigger waits for the transactions writing the table, and
-- every write waits behind it: 1 s at most, as set above.
DROP TRIGGER IF EXISTS jobfence_jobs_awaited_ended ON jobfence_jobs;
CREATE TRIGGER jobfence_jobs_awaited_ended AFTER UPDATE ON jobfence_jobs FOR EACH ROW
    WHEN (NEW.awaited IS TRUE AND NEW.state IN ('completed', 'discarded', 'cancelled') AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION jobfence_notify_awaited();
DROP TRIGGER IF EXISTS jobfence_jobs_awaited_gone ON jobfence_jobs;
CREATE TRIGGER jobfence_jobs_awaited_gone AFTER DELETE ON jobfence_jobs FOR EACH ROW
    WHEN (OLD.awaited IS TRUE)
    EXECUTE FUNCTION jobfence_notify_awaited();

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Waiters of this release then find their jobs by polling alone.
DROP TRIGGER IF EXISTS jobfence_jobs_awaited_ended ON jobfence_jobs;
DROP TRIGGER IF EXISTS jobfence_jobs_awaited_gone ON jobfence_jobs;
DROP FUNCTION IF EXISTS jobfence_notify_awaited();
ALTER TABLE jobfence_jobs DROP COLUMN IF EXISTS awaited;
ALTER TABLE jobfence_jobs_finished DROP COLUMN IF EXISTS awaited;
