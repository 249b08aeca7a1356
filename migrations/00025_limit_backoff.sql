-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- backoff_until: a partition that its provider rate-limited (a handler
-- returned JobRateLimited, for a 429 and its Retry-After) grants nothing
-- until then. Every slot row of the partition carries it, both kinds, so
-- that each grant reads it from the slot rows it reads anyway: a grant of
-- a partition with no backoff pays a comparison a slot and no extra read.
-- A later 429 pushes it later, never earlier (greatest). NULL (no
-- backoff) for every row: adding a nullable column without a default
-- rewrites nothing.
ALTER TABLE jobfence_limit_slots ADD COLUMN IF NOT EXISTS backoff_until timestamptz;

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- The backoffs in force are dropped: their partitions grant at once.
ALTER TABLE jobfence_limit_slots DROP COLUMN IF EXISTS backoff_until;
