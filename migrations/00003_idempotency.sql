-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- One row per idempotency key of a scope. A caller that claims a key holds
-- it 'in_progress' under a fence (a value of jobfence_fence_seq) until its
-- lease expires; completing it stores the response, and only the holder of
-- the current fence may complete it.
CREATE TABLE jobfence_idempotency_keys (
    scope            text        NOT NULL,
    key              text        NOT NULL,
    fingerprint      text        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('in_progress', 'completed')),
    fence            bigint      NOT NULL,
    lease_expires_at timestamptz,
    response         bytea,
    created_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);

-- Serves the pruner: keys by expiry.
CREATE INDEX jobfence_idempotency_keys_expires ON jobfence_idempotency_keys (expires_at);

-- Results written under a fence: a write applies only when no greater fence
-- has written the same key.
CREATE TABLE jobfence_results (
    scope      text        NOT NULL,
    key        text        NOT NULL,
    fence      bigint      NOT NULL,
    value      bytea,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key)
);

-- Serves the pruner: results of a scope by age.
CREATE INDEX jobfence_results_updated ON jobfence_results (scope, updated_at);

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
DROP TABLE jobfence_results;
DROP TABLE jobfence_idempotency_keys;
