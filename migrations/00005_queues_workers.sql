-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- One row per queue that was ever paused or resumed; a queue without a row
-- runs. Workers keep the set of paused queues in memory, refreshed by
-- NOTIFY jobfence_pause (payload: the queue's name) and by polling, so an
-- idle worker does not claim a paused queue; the claim itself also reads
-- its queue's row (a primary-key probe), so that no claim that starts
-- after a pause commits takes a job.
CREATE TABLE jobfence_queues (
    name       text PRIMARY KEY,
    paused_at  timestamptz,          -- NULL = running
    paused_by  text,                 -- who paused it (free text: user, host)
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text                  -- who paused or resumed it last
);

-- One row per running worker instance, upserted at its heartbeat interval
-- and deleted when it stops cleanly. A row not seen for 10 of its own
-- heartbeat intervals belongs to an instance that died, and the next
-- instance's upsert deletes it.
CREATE TABLE jobfence_workers (
    id                 text PRIMARY KEY,   -- the worker's ID (worker config WorkerID)
    host               text NOT NULL,
    pid                integer NOT NULL,
    queues             text[] NOT NULL,
    running            integer NOT NULL DEFAULT 0,   -- jobs running at the last beat
    completed          bigint NOT NULL DEFAULT 0,    -- cumulative since started_at
    stale              bigint NOT NULL DEFAULT 0,    -- outcomes refused by the fence, cumulative
    lost               bigint NOT NULL DEFAULT 0,    -- leases lost, cumulative
    started_at         timestamptz NOT NULL DEFAULT now(),
    last_seen_at       timestamptz NOT NULL DEFAULT now(),
    heartbeat_interval interval NOT NULL DEFAULT '10 seconds'  -- how often it upserts: decides when it counts as gone
);

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
DROP TABLE jobfence_workers;
DROP TABLE jobfence_queues;
