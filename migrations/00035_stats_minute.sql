-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Per-minute series for the dashboard's charts (docs/dashboard.md
-- "Charts"). Each instance adds what it counted in a minute to its
-- minute's rows, with one statement per minute (pgqueue's FlushSeries):
-- attempts ended, per outcome, enqueues, and a histogram of the wait from
-- a job's ready time to its attempt's start (wait_ms: counts per bucket,
-- bounds in pgqueue.WaitBucketBounds, the last one unbounded). Nothing on
-- a job's path writes here. Rows older than the longest retention are
-- pruned by the workers' maintenance.
CREATE TABLE IF NOT EXISTS jobfence_stats_minute (
    minute timestamptz NOT NULL,
    queue text NOT NULL,
    kind text NOT NULL,
    enqueued bigint NOT NULL DEFAULT 0,
    completed bigint NOT NULL DEFAULT 0,
    failed bigint NOT NULL DEFAULT 0,
    retried bigint NOT NULL DEFAULT 0,
    discarded bigint NOT NULL DEFAULT 0,
    wait_ms bigint[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (minute, queue, kind)
);
-- A queue's depth at a minute, sampled once per minute for the fleet: the
-- first instance to write a minute's rows wins (ON CONFLICT DO NOTHING),
-- and an instance that finds the minute sampled counts nothing.
CREATE TABLE IF NOT EXISTS jobfence_depth_minute (
    minute timestamptz NOT NULL,
    queue text NOT NULL,
    available bigint NOT NULL,
    scheduled bigint NOT NULL,
    limited bigint NOT NULL,
    PRIMARY KEY (minute, queue)
);

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
DROP TABLE IF EXISTS jobfence_depth_minute;
DROP TABLE IF EXISTS jobfence_stats_minute;
