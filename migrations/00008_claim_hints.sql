-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- One row per queue: the claim position, the highest (priority,
-- scheduled_at, id) any claim of the queue took, and when a claim last read
-- the queue from its start (head_at). Claims start after the position, so
-- the instances of a fleet do not each walk the index entries of the jobs
-- the others claimed, and one of them reads from the start at least every
-- 250 ms for the jobs that sort before it. Only a hint: UNLOGGED (emptied
-- after a crash, when the next claim reads from the start), and which jobs
-- a claim takes never decides safety, fences do.
CREATE UNLOGGED TABLE jobfence_claim_hints (
    queue        text PRIMARY KEY,
    priority     smallint NOT NULL,
    scheduled_at timestamptz NOT NULL,
    id           bigint NOT NULL,
    head_at      timestamptz NOT NULL
);

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
DROP TABLE jobfence_claim_hints;
