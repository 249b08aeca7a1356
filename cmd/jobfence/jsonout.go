package main

import (
	"encoding/json"
	"io"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/jobfence/jobfence/queue"
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
}

type attemptErrorJSON struct {
	Attempt int        `json:"attempt"`
	At      *time.Time `json:"at"`
	Error   string     `json:"error"`
	Trace   string     `json:"trace,omitempty"`
}

type scheduleJSON struct {
	Name          string     `json:"name"`
	Spec          string     `json:"spec"`
	TimeZone      string     `json:"time_zone"`
	Kind          string     `json:"kind"`
	Queue         string     `json:"queue"`
	CatchUp       string     `json:"catch_up"`
	SkipIfRunning bool       `json:"skip_if_running"`
	NextFire      *time.Time `json:"next_fire"`
	LastFire      *time.Time `json:"last_fire"`
	CreatedAt     *time.Time `json:"created_at"`
	UpdatedAt     *time.Time `json:"updated_at"`
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
			SkipIfRunning: i.SkipIfRunning, NextFire: jsonTime(i.NextFire), LastFire: jsonTime(i.LastFire),
			CreatedAt: jsonTime(i.CreatedAt), UpdatedAt: jsonTime(i.UpdatedAt),
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
