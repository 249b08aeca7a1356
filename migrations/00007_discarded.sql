-- +goose Up
-- Serves the dashboard's overview and /metrics: discarded jobs per queue,
-- counted without visiting the completed jobs that surround them (the
-- finalized index holds every final job). Only a job that becomes
-- discarded enters it, so the claim and the completion pay nothing for it.
CREATE INDEX jobfence_jobs_discarded ON jobfence_jobs (queue, id) WHERE state = 'discarded';

-- +goose Down
DROP INDEX jobfence_jobs_discarded;
