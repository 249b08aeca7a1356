package main

import (
	"encoding/json"
	"io"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// The --json shapes of the list and show commands. They are the CLI's
// interface to scripts, so they are spelled out here, in snake_case, rather
// than taken from the library's structs, whose fields may change: a field
// here is added, never renamed or removed. Times are RFC 3339 in UTC; an
// unset time is null.

type jobJSON struct {
	ID             int64              `json:"id"`
	Queue          string             `json:"queue"`
	Kind           string             `json:"kind"`
	State          string             `json:"state"`
	Priority       int                `json:"priority"`
	Attempt        int                `json:"attempt"`
	MaxAttempts    int                `json:"max_attempts"`
	Fence          int64              `json:"fence"`
	Args           json.RawMessage    `json:"args"`
	UniqueKey      string             `json:"unique_key,omitempty"`
	ScheduledAt    *time.Time         `json:"scheduled_at"`
	CreatedAt      *time.Time         `json:"created_at"`
	AttemptedAt    *time.Time         `json:"attempted_at"`
	LeaseExpiresAt *time.Time         `json:"lease_expires_at"`
	AttemptedBy    []string           `json:"attempted_by"`
	Errors         []attemptErrorJSON `json:"errors"`
	// Output is what the handler recorded; absent when nothing.
	Output json.RawMessage `json:"output,omitempty"`
	// Progress is the last progress the handler reported
	// (jobfence.Progress); absent when none.
	Progress json.RawMessage `json:"progress,omitempty"`
	// Logs are the attempts' stored logs (jobfence.Logger), oldest
	// attempt first (`jobs show` only); absent when none.
	Logs       []queue.AttemptLogs `json:"logs,omitempty"`
	WorkflowID string              `json:"workflow_id,omitempty"`
	TaskName   string              `json:"task_name,omitempty"`
	// Tags are the job's tags; absent when it has none.
	Tags []string `json:"tags,omitempty"`
	// Wait says why a limited job waits (`jobs show` only); absent for
	// a job that does not wait for a limit.
	Wait *limitWaitJSON `json:"wait,omitempty"`
}

// limitWaitJSON is pgqueue.LimitWait, with the sentence the text output
// prints.
type limitWaitJSON struct {
	Reason         string  `json:"reason"`
	Limit          string  `json:"limit"`
	Partition      string  `json:"partition"`
	LimitGone      bool    `json:"limit_gone"`
	Concurrency    int     `json:"concurrency"`
	SlotsHeld      int     `json:"slots_held"`
	Rate           int     `json:"rate"`
	PeriodSeconds  float64 `json:"period_seconds"`
	StartsInPeriod int     `json:"starts_in_period"`
	Ahead          int64   `json:"ahead"`
	AheadCapped    bool    `json:"ahead_capped"`
}

func toLimitWaitJSON(w *pgqueue.LimitWait) *limitWaitJSON {
	if w == nil {
		return nil
	}
	return &limitWaitJSON{
		Reason: w.String(), Limit: w.Limit, Partition: w.Partition, LimitGone: w.LimitGone,
		Concurrency: w.Concurrency, SlotsHeld: w.SlotsHeld, Rate: w.Rate, PeriodSeconds: w.Period.Seconds(),
		StartsInPeriod: w.StartsInPeriod, Ahead: w.Ahead, AheadCapped: w.AheadCapped,
	}
}

type attemptErrorJSON struct {
	Attempt int        `json:"attempt"`
	At      *time.Time `json:"at"`
	Error   string     `json:"error"`
	Trace   string     `json:"trace,omitempty"`
}

type scheduleJSON struct {
	Name          string `json:"name"`
	Spec          string `json:"spec"`
	TimeZone      string `json:"time_zone"`
	Kind          string `json:"kind"`
	Queue         string `json:"queue"`
	CatchUp       string `json:"catch_up"`
	SkipIfRunning bool   `json:"skip_if_running"`
	// Args is null for a schedule registered by a release that did not
	// store them.
	Args        json.RawMessage `json:"args"`
	Priority    int             `json:"priority"`
	MaxAttempts int             `json:"max_attempts"`
	// CatchUpWindowSeconds is 0 for the default (half the retention).
	CatchUpWindowSeconds float64 `json:"catch_up_window_seconds"`
	// Runtime is true for a schedule added at run time (every instance
	// fires it), false for one defined in code.
	Runtime     bool       `json:"runtime"`
	Paused      bool       `json:"paused"`
	PausedAt    *time.Time `json:"paused_at"`
	PausedBy    string     `json:"paused_by"`
	NextFire    *time.Time `json:"next_fire"`
	LastFire    *time.Time `json:"last_fire"`
	TriggeredAt *time.Time `json:"triggered_at"`
	CreatedAt   *time.Time `json:"created_at"`
	UpdatedAt   *time.Time `json:"updated_at"`
}

type queueJSON struct {
	Name      string     `json:"name"`
	Paused    bool       `json:"paused"`
	PausedAt  *time.Time `json:"paused_at"`
	PausedBy  string     `json:"paused_by"`
	UpdatedAt *time.Time `json:"updated_at"`
	UpdatedBy string     `json:"updated_by"`
	// Concurrency is the concurrency stored for the fleet (0: each
	// worker's own); Run is "started", "stopped" or "" (as configured).
	Concurrency int    `json:"concurrency"`
	Run         string `json:"run"`
	// Counts has every state, those without jobs at zero; a state in
	// CountsAtLeast has at least its count (counting stopped at a cap).
	Counts            map[string]int64 `json:"counts"`
	CountsAtLeast     []string         `json:"counts_at_least"`
	OldestAvailableAt *time.Time       `json:"oldest_available_at"`
}

type workerJSON struct {
	ID                  string     `json:"id"`
	Host                string     `json:"host"`
	PID                 int        `json:"pid"`
	Queues              []string   `json:"queues"`
	Running             int        `json:"running"`
	Completed           int64      `json:"completed"`
	Stale               int64      `json:"stale"`
	Lost                int64      `json:"lost"`
	StartedAt           *time.Time `json:"started_at"`
	LastSeenAt          *time.Time `json:"last_seen_at"`
	HeartbeatIntervalMS int64      `json:"heartbeat_interval_ms"`
	Live                bool       `json:"live"`
}

type migrationJSON struct {
	Version   int64      `json:"version"`
	Path      string     `json:"path"`
	AppliedAt *time.Time `json:"applied_at"`
}

func jsonTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func toJobJSON(j *queue.Job) jobJSON {
	out := jobJSON{
		ID: j.ID, Queue: j.Queue, Kind: j.Kind, State: string(j.State), Priority: j.Priority,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Fence: j.Fence, UniqueKey: j.UniqueKey,
		Args: json.RawMessage(j.EncodedArgs), ScheduledAt: jsonTime(j.ScheduledAt), CreatedAt: jsonTime(j.CreatedAt),
		AttemptedAt: jsonTime(j.AttemptedAt), LeaseExpiresAt: jsonTime(j.LeaseExpiresAt),
		AttemptedBy: j.AttemptedBy, Errors: []attemptErrorJSON{},
		Output: j.Output, Progress: j.Progress, Logs: j.Logs, WorkflowID: j.WorkflowID, TaskName: j.TaskName, Tags: j.Tags,
	}
	if len(out.Args) == 0 {
		out.Args = json.RawMessage("{}")
	}
	if out.AttemptedBy == nil {
		out.AttemptedBy = []string{}
	}
	for _, e := range j.Errors {
		out.Errors = append(out.Errors, attemptErrorJSON{Attempt: e.Attempt, At: jsonTime(e.At), Error: e.Error, Trace: e.Trace})
	}
	return out
}

func toJobsJSON(jobs []*queue.Job) []jobJSON {
	out := make([]jobJSON, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, toJobJSON(j))
	}
	return out
}

func toSchedulesJSON(infos []scheduler.Info) []scheduleJSON {
	out := make([]scheduleJSON, 0, len(infos))
	for _, i := range infos {
		out = append(out, scheduleJSON{
			Name: i.Name, Spec: i.Spec, TimeZone: i.TimeZone, Kind: i.Kind, Queue: i.Queue, CatchUp: i.CatchUp,
			SkipIfRunning: i.SkipIfRunning, Args: i.Args, Priority: i.Priority, MaxAttempts: i.MaxAttempts,
			CatchUpWindowSeconds: i.CatchUpWindow.Seconds(), Runtime: i.Runtime,
			Paused: i.Paused, PausedAt: jsonTime(i.PausedAt), PausedBy: i.PausedBy,
			NextFire: jsonTime(i.NextFire), LastFire: jsonTime(i.LastFire), TriggeredAt: jsonTime(i.TriggeredAt),
			CreatedAt: jsonTime(i.CreatedAt), UpdatedAt: jsonTime(i.UpdatedAt),
		})
	}
	return out
}

func toQueuesJSON(qs []pgqueue.QueueInfo) []queueJSON {
	out := make([]queueJSON, 0, len(qs))
	for _, q := range qs {
		counts := make(map[string]int64, len(queue.States()))
		atLeast := []string{}
		for _, s := range queue.States() {
			counts[string(s)] = q.Counts[s].N
			if q.Counts[s].AtLeast {
				atLeast = append(atLeast, string(s))
			}
		}
		out = append(out, queueJSON{
			Name: q.Name, Paused: q.Paused, PausedAt: jsonTime(q.PausedAt), PausedBy: q.PausedBy,
			UpdatedAt: jsonTime(q.UpdatedAt), UpdatedBy: q.UpdatedBy, Concurrency: q.Concurrency, Run: string(q.Run),
			Counts: counts, CountsAtLeast: atLeast,
			OldestAvailableAt: jsonTime(q.OldestAvailable),
		})
	}
	return out
}

func toWorkersJSON(ws []pgqueue.WorkerInfo) []workerJSON {
	out := make([]workerJSON, 0, len(ws))
	for _, w := range ws {
		queues := w.Queues
		if queues == nil {
			queues = []string{}
		}
		out = append(out, workerJSON{
			ID: w.ID, Host: w.Host, PID: w.PID, Queues: queues, Running: w.Running,
			Completed: w.Completed, Stale: w.Stale, Lost: w.Lost,
			StartedAt: jsonTime(w.StartedAt), LastSeenAt: jsonTime(w.LastSeenAt),
			HeartbeatIntervalMS: w.HeartbeatInterval.Milliseconds(), Live: w.Live,
		})
	}
	return out
}

func toMigrationsJSON(st []*goose.MigrationStatus) []migrationJSON {
	out := make([]migrationJSON, 0, len(st))
	for _, s := range st {
		out = append(out, migrationJSON{Version: s.Source.Version, Path: s.Source.Path, AppliedAt: jsonTime(s.AppliedAt)})
	}
	return out
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
