package jobfence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/scheduler"
)

// TestClientLimits: an insert-only client sets, lists, reads the use of
// and deletes limits; a limit it cannot use names the field.
func TestClientLimits(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, jobfence.Config{})
	limits := c.Limits()

	err := limits.Set(ctx, jobfence.Limit{Name: "provider", Concurrency: 5})
	var bad *jobfence.InvalidLimitError
	if !errors.As(err, &bad) || bad.Field == "" {
		t.Fatalf("Set without a queue: %v, want an *InvalidLimitError naming the field", err)
	}
	wantErr(t, "Set without a queue", err, nil, "invalid limit", "queue")

	if err := limits.Set(ctx, jobfence.Limit{Name: "provider", Queue: "calls", Concurrency: 1, OnFailure: jobfence.FailureHold}); err != nil {
		t.Fatal(err)
	}
	if err := limits.Set(ctx, jobfence.Limit{Name: "per-customer", Queue: "calls", Kind: "greet", PartitionBy: []string{"name"}, Rate: 10, Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ls, err := limits.List(ctx)
	if err != nil || len(ls) != 2 || ls[0].Name != "per-customer" || ls[1].OnFailure != jobfence.FailureHold {
		t.Fatalf("List: %+v, %v; want both, by name, provider holding", ls, err)
	}
	for range 2 {
		if _, err := c.Insert(ctx, tick{}, &jobfence.InsertOpts{Queue: "calls"}); err != nil {
			t.Fatal(err)
		}
	}
	uses, err := limits.Uses(ctx)
	if err != nil || len(uses) != 2 || uses[1].Name != "provider" || uses[1].InUse != 1 || uses[1].Waiting != 1 {
		t.Fatalf("Uses: %+v, %v; want provider with 1 slot held and 1 job waiting", uses, err)
	}
	if err := limits.Delete(ctx, "provider"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Delete of an unknown limit", limits.Delete(ctx, "provider"), jobfence.ErrLimitNotFound, `"provider"`)
	if counts, err := c.Counts(ctx, "calls"); err != nil || counts[queue.StateAvailable] != 2 {
		t.Errorf("counts after the limit's delete: %v, %v; want both jobs available", counts, err)
	}
}

// TestClientSchedulesInsertOnly: an insert-only client, which runs no
// scheduler, adds, pauses, resumes, triggers, lists and deletes
// schedules, and a started client fires what it added; bad input and
// unknown names say what is wrong.
func TestClientSchedulesInsertOnly(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	api := newClient(t, db.Pool, jobfence.Config{})
	if api.Scheduler() != nil {
		t.Fatal("an insert-only client has a scheduler")
	}
	s := api.Schedules()

	_, err := s.Put(ctx, "", "@hourly", tick{}, jobfence.ScheduleOptions{})
	wantErr(t, "Put without a name", err, nil, "a schedule name is required")
	_, err = s.Put(ctx, "tick", "@hourly", nil, jobfence.ScheduleOptions{})
	wantErr(t, "Put of nil args", err, nil, `put schedule "tick": nil args`)
	_, err = s.Put(ctx, "tick", "61 * * * *", tick{}, jobfence.ScheduleOptions{})
	var se *jobfence.ScheduleError
	if !errors.As(err, &se) || !errors.Is(err, scheduler.ErrInvalidSpec) || se.Name != "tick" {
		t.Errorf("Put of a bad spec: %v, want a *ScheduleError wrapping ErrInvalidSpec", err)
	}

	if created, err := s.Put(ctx, "tick", "@hourly", tick{}, jobfence.ScheduleOptions{Queue: "ticks", CatchUp: jobfence.CatchUpLatest}); err != nil || !created {
		t.Fatalf("Put: %v, %v; want created", created, err)
	}
	if created, err := s.Put(ctx, "tick", "* * * * * *", tick{}, jobfence.ScheduleOptions{Queue: "ticks"}); err != nil || created {
		t.Fatalf("Put of a new definition: %v, %v; want it replaced, not created", created, err)
	}
	if paused, err := s.Pause(ctx, "tick", "ops"); err != nil || !paused {
		t.Fatalf("Pause: %v, %v; want paused by this call", paused, err)
	}
	if paused, err := s.Pause(ctx, "tick", "ops"); err != nil || paused {
		t.Errorf("Pause of a paused schedule: %v, %v; want false, it was paused already", paused, err)
	}
	info, err := s.Get(ctx, "tick")
	if err != nil || !info.Paused || info.PausedBy != "ops" || info.Spec != "* * * * * *" || !info.Runtime {
		t.Fatalf("Get: %+v, %v", info, err)
	}
	fire, err := s.Trigger(ctx, "tick")
	if err != nil || !fire.Inserted || !fire.Triggered || fire.JobID == 0 {
		t.Fatalf("Trigger of a paused schedule: %+v, %v; want its job", fire, err)
	}
	if j, err := api.Get(ctx, fire.JobID); err != nil || j.Queue != "ticks" || j.Kind != "tick" {
		t.Fatalf("the triggered job: %+v, %v", j, err)
	}

	// A worker's client fires the schedule once resumed.
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[tick]) error { return nil })
	workers := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"ticks": 2}, Handlers: reg})
	start(t, workers)
	if resumed, err := s.Resume(ctx, "tick"); err != nil || !resumed {
		t.Fatalf("Resume: %v, %v; want resumed by this call", resumed, err)
	}
	if resumed, err := s.Resume(ctx, "tick"); err != nil || resumed {
		t.Errorf("Resume of a running schedule: %v, %v; want false", resumed, err)
	}
	testwatch.WaitFor(t, 30*time.Second, "a fire of the resumed schedule", func() bool { return countJobs(t, db.Pool, "tick") > 1 })
	if list, err := s.List(ctx); err != nil || len(list) != 1 || list[0].Name != "tick" || list[0].Paused {
		t.Errorf("List: %+v, %v; want tick, running", list, err)
	}
	if err := s.Delete(ctx, "tick"); err != nil {
		t.Fatal(err)
	}

	for what, err := range map[string]error{
		"Get":     func() error { _, err := s.Get(ctx, "tick"); return err }(),
		"Pause":   func() error { _, err := s.Pause(ctx, "tick", "ops"); return err }(),
		"Resume":  func() error { _, err := s.Resume(ctx, "tick"); return err }(),
		"Trigger": func() error { _, err := s.Trigger(ctx, "tick"); return err }(),
		"Delete":  s.Delete(ctx, "tick"),
	} {
		wantErr(t, what+" of a deleted schedule", err, jobfence.ErrScheduleNotFound, `"tick"`, "no such schedule")
	}
	for what, err := range map[string]error{
		"Get":     func() error { _, err := s.Get(ctx, ""); return err }(),
		"Pause":   func() error { _, err := s.Pause(ctx, "", "ops"); return err }(),
		"Resume":  func() error { _, err := s.Resume(ctx, ""); return err }(),
		"Trigger": func() error { _, err := s.Trigger(ctx, ""); return err }(),
		"Delete":  s.Delete(ctx, ""),
	} {
		wantErr(t, what+` of ""`, err, nil, "a schedule name is required")
	}
}

// TestClientQueues: any client pauses and resumes a queue for the fleet
// and lists it; a queue without a name is refused.
func TestClientQueues(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, jobfence.Config{})
	qs := c.Queues()
	if _, err := c.Insert(ctx, tick{}, &jobfence.InsertOpts{Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	if err := qs.Pause(ctx, "mail", "ada@ops"); err != nil {
		t.Fatal(err)
	}
	list, err := qs.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "mail" || !list[0].Paused || list[0].PausedBy != "ada@ops" ||
		list[0].Count(queue.StateAvailable).N != 1 {
		t.Fatalf("List: %+v, %v; want mail, paused by ada@ops, 1 job available", list, err)
	}
	if err := qs.Resume(ctx, "mail", "ada@ops"); err != nil {
		t.Fatal(err)
	}
	if list, err := qs.List(ctx); err != nil || list[0].Paused {
		t.Errorf("List after Resume: %+v, %v", list, err)
	}
	wantErr(t, "Pause of no queue", qs.Pause(ctx, "", "ops"), jobfence.ErrNoQueueName, "a queue name is required")
	wantErr(t, "Resume of no queue", qs.Resume(ctx, "", "ops"), jobfence.ErrNoQueueName)
}

// TestClientSchedulesCheckAgainstRetention: an insert-only client checks a
// schedule's catch-up window against its own Config (Worker.Retention),
// as a running scheduler does, not against the package's default.
func TestClientSchedulesCheckAgainstRetention(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	cfg := jobfence.Config{}
	cfg.Worker.Retention = time.Hour
	c := newClient(t, db.Pool, cfg)
	_, err := c.Schedules().Put(ctx, "report", "@daily", tick{}, jobfence.ScheduleOptions{CatchUp: jobfence.CatchUpAll, CatchUpWindow: 2 * time.Hour})
	var se *jobfence.ScheduleError
	if !errors.As(err, &se) || !errors.Is(err, scheduler.ErrInvalidOptions) {
		t.Fatalf("Put of a catch-up window past the client's 1h retention: %v, want a *ScheduleError wrapping ErrInvalidOptions", err)
	}
	if _, err := c.Schedules().Put(ctx, "report", "@daily", tick{}, jobfence.ScheduleOptions{CatchUp: jobfence.CatchUpAll, CatchUpWindow: 30 * time.Minute}); err != nil {
		t.Fatalf("Put of a window within the retention: %v", err)
	}
}
