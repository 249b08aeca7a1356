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
// otherwise, and the default is UTC. @every d fires at the multiples of d
// since the Unix epoch, so every instance agrees on its fires whenever it
// started.
//
// Daylight-saving time. A schedule that names its hours ("0 3 * * *",
// "30 2 * * 0", @daily) fires once for each wall-clock time it matches: a
// time skipped in spring fires at the transition (02:30 on the day
// Europe/Berlin goes from 02:00 to 03:00 fires at 03:00, once, however
// many of its times fall in the gap), and a time repeated in autumn fires
// at its first occurrence only (01:30 EDT, not 01:30 EST, in
// America/New_York), as cron(8) does for jobs at a fixed time. A schedule
// that runs every hour (its hour field is * or covers all 24: "30 * * * *",
// "*/5 * * * *", @hourly) follows the clock instead: the hour skipped in
// spring has no fires, and the repeated hour has its fires twice (01:30 EDT
// and 01:30 EST are an hour apart: two fires, two keys), so its fires stay
// evenly spaced in real time. Either way the fire times follow from the
// spec and the zone's rules alone, so every instance, and catch-up after
// downtime, finds the same ones.
//
// The schedules table records each schedule's definition, its last enqueued
// fire and its next fire (see List and `jobfence schedules list`). An
// instance that starts with a changed definition replaces the stored one (the
// last writer wins) and logs the change. After downtime, Start enqueues the
// fires missed since the last enqueued one as each schedule's CatchUpPolicy
// says. A fire's unique key protects it only while its job is stored, so
// catch-up never looks back as far as the job retention (Config.Retention).
//
// # Changing schedules while the fleet runs
//
// Put adds a schedule, or replaces a schedule's definition (spec, kind,
// args, queue and the other options), Pause and Resume pause and resume
// one, Delete removes one and Trigger enqueues one fire now ("run now"),
// all without a restart: package functions on a pool (for tools: `jobfence
// schedules add|pause|resume|delete|trigger`, the dashboard) and methods of
// a Scheduler, before or after Start. Every running Scheduler reads the
// schedules table every Config.SyncInterval (2 s by default; one small
// query, rows read again only when their version moved) and picks up
// each change; there is still no leader, and each fire is still one job
// through its unique key.
//
// Which wins. A schedule defined in code (Add) is written to the table at
// each Start of an instance that defines it: the code's definition
// replaces a change made at run time, and only instances that define it
// fire it, so removing it from the code stops it. A schedule added at run
// time (Put of a new name) lives in the table until Delete, and every
// instance fires it, those started later included. Pausing is not part of
// a definition: a paused schedule stays paused across restarts and
// deploys, whichever defines it, until Resume. Delete of a schedule still
// defined in code lasts until an instance that defines it starts.
//
// A pause is decided where a fire is enqueued: the fire's transaction
// reads the schedule's row under a lock and enqueues nothing if the
// schedule is paused, deleted, or at another version than the one the
// instance fires (it then reads the table again at once). So no instance
// enqueues a fire after Pause, Put or Delete returns, however stale its
// view. A changed or resumed schedule fires from the change on: the fires
// of a pause are not caught up.
//
// A handler learns the fire its job runs for with FireOf: the schedule
// and the fire time, read from the job's unique key, the same at every
// attempt (a retry moves the job's ScheduledAt, not its fire).
//
// See docs/cron.md.
package scheduler
