// Package dashboard is jobfence's web UI as an http.Handler: an overview
// of every queue, the jobs with their attempts, queues with pause and
// resume, cron schedules, live worker instances, idempotency keys and
// fenced results, and a Prometheus /metrics of fleet-wide series read from
// the database.
//
// A service mounts New under a path of its own, behind its own
// authentication; `jobfence ui` serves it standalone. Pages are rendered
// server-side with html/template, so every value (job arguments and errors
// are user data) is escaped; the little JavaScript it uses is an embedded
// file, and the Content-Security-Policy allows no inline script. Actions
// (retry, cancel, delete, bulk retry and delete, pause and resume) are POST
// requests that carry a CSRF token, are refused when Options.ReadOnly is
// set, and are logged with who made them.
//
// See docs/dashboard.md.
package dashboard
