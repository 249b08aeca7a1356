package workflow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/worker"
)

// Batch is a group of jobs (its members) with a callback job that runs
// once, when every member has ended, whatever each one's outcome:
// Sidekiq's batch with an on-complete callback, Oban Pro's batch with
// its callback. Build it with NewBatch, Add and OnComplete, then insert
// it (InsertBatch, or jobfence.Client.InsertBatch).
//
// A batch is a workflow: each member a task without dependencies, the
// callback a task that depends on all of them and runs anyway
// (TaskOpts.RunAnyway). So it takes the workflow's guarantees: the
// members' ends are counted by their fenced outcomes, each once (a stale
// attempt's outcome counts nothing), a member still retrying has not
// ended, a discarded or cancelled member has, and the callback runs once
// (it is one job, released once). Its handler reads how each member
// ended with BatchMembers. Workflows().Get, Cancel and Retry take the
// batch's ID as they take a workflow's.
type Batch struct {
	name     string
	members  []memberSpec
	callback *memberSpec
}

// memberSpec is one job of a batch, as given.
type memberSpec struct {
	args queue.Args
	opts *queue.InsertOpts
}

// CallbackTask is the task name of a batch's callback in its workflow.
const CallbackTask = "callback"

// memberPrefix starts each member's task name: member-<index>.
const memberPrefix = "member-"

// NewBatch starts a batch named name (a description for listings, as a
// workflow's name).
func NewBatch(name string) *Batch { return &Batch{name: name} }

// Add adds a member job running args's kind with opts (nil takes the
// args type's defaults; UniqueKey must be empty), and returns b.
func (b *Batch) Add(args queue.Args, opts *queue.InsertOpts) *Batch {
	b.members = append(b.members, memberSpec{args: args, opts: opts})
	return b
}

// OnComplete sets the batch's callback: a job running args's kind with
// opts, that runs once every member has ended (completed, discarded or
// cancelled); its handler reads their outcomes with BatchMembers. A
// batch needs one; a second call replaces the first.
func (b *Batch) OnComplete(args queue.Args, opts *queue.InsertOpts) *Batch {
	b.callback = &memberSpec{args: args, opts: opts}
	return b
}

// Workflow returns the batch as the workflow it is inserted as, or an
// error wrapping ErrInvalid for a batch without members or callback.
func (b *Batch) Workflow() (*Workflow, error) {
	switch {
	case len(b.members) == 0:
		return nil, fmt.Errorf("workflow: batch %q: %w: it has no members; Add at least one", b.name, ErrInvalid)
	case b.callback == nil:
		return nil, fmt.Errorf("workflow: batch %q: %w: it has no callback; set one with OnComplete (a batch without one is a plain InsertMany)", b.name, ErrInvalid)
	}
	w := New(b.name)
	names := make([]string, len(b.members))
	for i, m := range b.members {
		names[i] = memberPrefix + strconv.Itoa(i)
		w.Add(names[i], m.args, &TaskOpts{Insert: m.opts})
	}
	w.Add(CallbackTask, b.callback.args, &TaskOpts{DependsOn: names, RunAnyway: true, Insert: b.callback.opts})
	return w, nil
}

// BatchResult is what inserting a batch did.
type BatchResult struct {
	// ID is the batch's workflow ID (Workflows().Get reads it).
	ID string
	// Members are the members' job IDs, in the order they were added.
	Members []int64
	// Callback is the callback's job ID.
	Callback int64
}

// batchResult maps a workflow insert's result to the batch's.
func (b *Batch) batchResult(r queue.WorkflowResult) BatchResult {
	out := BatchResult{ID: r.ID, Members: make([]int64, len(b.members)), Callback: r.Tasks[CallbackTask]}
	for i := range b.members {
		out.Members[i] = r.Tasks[memberPrefix+strconv.Itoa(i)]
	}
	return out
}

// InsertBatch inserts b in one transaction of its own: every member and
// the callback, or nothing. A batch without members or callback is an
// error wrapping ErrInvalid; a backend that cannot run workflows
// (kafkaqueue), one wrapping ErrUnsupported.
func InsertBatch(ctx context.Context, be queue.WorkflowInserter, b *Batch) (BatchResult, error) {
	if b == nil {
		return BatchResult{}, errors.New("workflow: insert batch: nil batch")
	}
	w, err := b.Workflow()
	if err != nil {
		return BatchResult{}, err
	}
	r, err := Insert(ctx, be, w)
	if err != nil {
		return BatchResult{}, err
	}
	return b.batchResult(r), nil
}

// InsertBatchTx is InsertBatch inside the caller's transaction tx: the
// batch exists only if tx commits.
func InsertBatchTx(ctx context.Context, be TxInserter, tx pgx.Tx, b *Batch) (BatchResult, error) {
	if b == nil {
		return BatchResult{}, errors.New("workflow: insert batch: nil batch")
	}
	w, err := b.Workflow()
	if err != nil {
		return BatchResult{}, err
	}
	r, err := InsertTx(ctx, be, tx, w)
	if err != nil {
		return BatchResult{}, err
	}
	return b.batchResult(r), nil
}

// Member is how one member of a batch ended, as its callback reads it
// (BatchMembers).
type Member struct {
	// Index is the member's place in the order it was added.
	Index int
	queue.TaskResult
}

// Completed reports whether the member completed.
func (m Member) Completed() bool { return m.State == queue.StateCompleted }

// Decode decodes the member's recorded output into v; an error wrapping
// ErrNoOutput when it did not complete or recorded none.
func (m Member) Decode(v any) error {
	switch {
	case m.State != queue.StateCompleted:
		return fmt.Errorf("workflow: output of batch member %d (job %d): %w: it is %s", m.Index, m.JobID, ErrNoOutput, m.stateName())
	case m.Output == nil:
		return fmt.Errorf("workflow: output of batch member %d (job %d): %w: it completed without recording any", m.Index, m.JobID, ErrNoOutput)
	}
	if err := json.Unmarshal(m.Output, v); err != nil {
		return fmt.Errorf("workflow: output of batch member %d (job %d) does not decode into %T: %w", m.Index, m.JobID, v, err)
	}
	return nil
}

func (m Member) stateName() string {
	if m.State == "" {
		return "gone (pruned after its retention)"
	}
	return string(m.State)
}

// DependencyReader is a backend that reads how a task's dependencies
// ended (pgqueue.Client).
type DependencyReader interface {
	DependencyResults(ctx context.Context, job int64) ([]queue.TaskResult, error)
}

// ErrNotACallback is wrapped by BatchMembers's error called from a
// workflow task that is not a batch's callback.
var ErrNotACallback = errors.New("jobfence: not a batch's callback")

// BatchMembers returns how each member of the batch ended, in the order
// they were added, read from the handler of the batch's callback whose
// context ctx is: each one's job, state (completed, discarded or
// cancelled), last attempt, output (Member.Decode) and last error. It
// returns an error wrapping ErrNotATask outside a workflow task's
// handler, and ErrNotACallback from a task that is not a batch's
// callback.
func BatchMembers(ctx context.Context) ([]Member, error) {
	job := worker.JobFromContext(ctx)
	if job == nil || job.WorkflowID == "" {
		return nil, fmt.Errorf("workflow: batch members: %w", ErrNotATask)
	}
	if job.TaskName != CallbackTask {
		return nil, fmt.Errorf("workflow: batch members: %w: the task is %q", ErrNotACallback, job.TaskName)
	}
	r, ok := worker.BackendFromContext(ctx).(DependencyReader)
	if !ok {
		return nil, fmt.Errorf("workflow: batch members: %w", ErrUnsupported)
	}
	res, err := r.DependencyResults(ctx, job.ID)
	if err != nil {
		return nil, fmt.Errorf("workflow: batch members: %w", err)
	}
	out := make([]Member, 0, len(res))
	for k, t := range res {
		if t.Name == "" {
			// Pruned: its place in the callback's dependencies, which
			// follow the members' order, is its index.
			out = append(out, Member{Index: k, TaskResult: t})
			continue
		}
		i, err := strconv.Atoi(strings.TrimPrefix(t.Name, memberPrefix))
		if !strings.HasPrefix(t.Name, memberPrefix) || err != nil {
			return nil, fmt.Errorf("workflow: batch members: %w: it depends on task %q, not a member", ErrNotACallback, t.Name)
		}
		out = append(out, Member{Index: i, TaskResult: t})
	}
	slices.SortStableFunc(out, func(a, b Member) int { return cmp.Compare(a.Index, b.Index) })
	return out, nil
}
