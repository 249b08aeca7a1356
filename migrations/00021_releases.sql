-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- jobfence_releases: the dependents that a completed workflow task's
-- completion left to release after its commit. A completion releases the
-- first chunk of its task's dependents itself, under its fence, and
-- records the rest here as ranges of the task's dependents list, entries
-- first to last (1-based, inclusive), in the same transaction; the client
-- that completed it releases each range in a statement of its own, which
-- deletes it, and a worker's maintenance releases those a stopped client
-- left (pgqueue.Client.ReleaseDependents). A new table that no one else
-- sees yet: creating it locks nothing of the fleet's.
CREATE TABLE IF NOT EXISTS jobfence_releases (
    task_id    bigint      NOT NULL,
    first      integer     NOT NULL,
    last       integer     NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, first)
);

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Refused while a range waits: its dependents would stay pending, since
-- the workers before this migration release every dependent in the
-- completion. Let this release's workers run until the table is empty
-- (it empties within a rescue interval), then migrate down.
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('jobfence_releases') IS NOT NULL AND EXISTS (SELECT FROM jobfence_releases) THEN
        RAISE EXCEPTION 'jobfence: workflow dependents are still waiting to be released (jobfence_releases is not empty): run this release''s workers until it is, then migrate down';
    END IF;
END $$;
-- +goose StatementEnd
DROP TABLE IF EXISTS jobfence_releases;
