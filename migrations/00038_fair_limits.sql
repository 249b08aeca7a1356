-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Fair share inside a limit's partition (pgqueue.Limit.FairBy,
-- docs/limits.md#fair-share): the grant hands the partition's free slots
-- round-robin across the values of one field of the jobs' args (a
-- tenant), weighted by fair_weights, rather than to the oldest job.
--
-- fair_by and fair_weights: the limit's field ('' for none: oldest job
-- first, as before) and its weights by value. A constant default
-- rewrites nothing.
ALTER TABLE jobfence_limits ADD COLUMN IF NOT EXISTS fair_by text NOT NULL DEFAULT '';
ALTER TABLE jobfence_limits ADD COLUMN IF NOT EXISTS fair_weights jsonb NOT NULL DEFAULT '{}';
-- limit_fair: a job's value of its fair limit's field, kept as its
-- partition is (limit_part), NULL under a limit without FairBy; its index
-- (00043) orders a partition's waiting jobs by it. jobfence_jobs_finished
-- has it too: a completion that moves the row there carries it (pgqueue's
-- finishedColumns). Nullable without a default: adding it rewrites
-- nothing and costs a job of another limit nothing.
ALTER TABLE jobfence_jobs ADD COLUMN IF NOT EXISTS limit_fair text;
ALTER TABLE jobfence_jobs_finished ADD COLUMN IF NOT EXISTS limit_fair text;
-- jobfence_limit_fair: each fair partition's round-robin cursor, the
-- value that its last grant served last and how many jobs of that value
-- it has had in its current turn. Only a grant writes it, taking its row
-- with SKIP LOCKED (a grant never waits for another's cursor).
CREATE TABLE IF NOT EXISTS jobfence_limit_fair (
    name      text    NOT NULL,
    part      text    NOT NULL,
    last_fair text    NOT NULL,
    taken     integer NOT NULL,
    PRIMARY KEY (name, part)
);

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Fair limits grant oldest first again: the cursors and keys are lost.
DROP TABLE IF EXISTS jobfence_limit_fair;
ALTER TABLE jobfence_jobs_finished DROP COLUMN IF EXISTS limit_fair;
ALTER TABLE jobfence_jobs DROP COLUMN IF EXISTS limit_fair;
ALTER TABLE jobfence_limits DROP COLUMN IF EXISTS fair_weights;
ALTER TABLE jobfence_limits DROP COLUMN IF EXISTS fair_by;
