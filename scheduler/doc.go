// Package scheduler turns cron schedules into jobs, once per fire for a
// whole fleet, with no leader and no lock.
//
// Every instance of a service creates a Scheduler, adds the same schedules and
// starts it. At each fire t of schedule s, every instance inserts the job
// with the unique key cron:s:<t's Unix time> (ON CONFLICT DO NOTHING): the
// first insert wins and the others find the job already there. Fire times
// come from the spec (robfig/cron/v3), never from a host's clock reading, so
// instances whose clocks are seconds apart still produce the same keys; a
// skewed clock only makes an instance try a fire early or late.
//
// Specs have five fields (minute hour day-of-month month day-of-week), an
// optional leading seconds field, descriptors (@hourly, @daily, @every 90s)
// and an optional CRON_TZ=Zone prefix; Options.TimeZone sets the zone
// otherwise, and the default is UTC. Daylight-saving transitions behave as
// robfig/cron documents: a fire inside the hour skipped in spring does not
// happen, and one inside the hour repeated in autumn happens at both offsets
// (two fires, two keys, two jobs). @every d fires at the multiples of d since the Unix epoch, so every
// instance agrees on its fires whenever it started.
//
// The schedules table records each schedule's definition, its last enqueued
// fire and its next fire (see List and `jobfence schedules list`). An
// instance that starts with a changed definition replaces the stored one (the
// last writer wins) and logs the change. After downtime, Start enqueues the
// fires missed since the last enqueued one as each schedule's CatchUpPolicy
// says. A fire's unique key protects it only while its job is stored, so
// catch-up never looks back as far as the job retention (Config.Retention).
package scheduler
