package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// WorkflowTask is one task of a workflow to insert: a job with a name and
// the names of the tasks it depends on.
type WorkflowTask struct {
	// Name names the task within its workflow; required and unique there.
	Name string
	// Params is the task's job. Its UniqueKey must be empty and its
	// Unique nil: a task that an existing job's key swallowed would leave
	// its dependents waiting for a job outside the workflow.
	Params EnqueueParams
	// DependsOn names the tasks that must complete before this one runs:
	// tasks inserted with it, or tasks the workflow has already.
	DependsOn []string
	// RunAnyway runs the task once its dependencies have ended, whatever
	// their outcome; by default a task whose dependency was discarded or
	// cancelled is cancelled, with that reason.
	RunAnyway bool
	// RunOnFailure runs the task (a compensation) once its dependencies
	// have ended only if at least one was discarded or cancelled; if all
	// completed, it is cancelled with the reason "no dependency failed",
	// and its own dependents are treated as that cancel implies. It needs
	// DependsOn, and excludes RunAnyway.
	RunOnFailure bool
}

// WorkflowParams is a workflow, or tasks added to one, to insert.
type WorkflowParams struct {
	// ID is the workflow's ID: empty starts a new workflow (its ID is
	// drawn and returned); an existing workflow's adds the tasks to it.
	ID string
	// Name describes a new workflow in listings; required for one.
	Name string
	// Tasks are the tasks to insert, in any order.
	Tasks []WorkflowTask
	// Parent, when its ID is not zero, makes the workflow a child of the
	// job it leases (workflow.StartChild): the workflow is inserted only
	// while that job runs under the lease's fence (a stale attempt's
	// insert fails with a *StaleFenceError), and cancelling the job
	// cancels it. ID is then required, and names the new workflow: an
	// insert that finds a child workflow of that ID and parent inserts
	// nothing and returns it, so that a retried start finds what an
	// earlier attempt inserted.
	Parent Lease
}

// WorkflowResult is what inserting a workflow returns.
type WorkflowResult struct {
	// ID is the workflow's ID.
	ID string
	// Tasks maps each inserted task's name to its job's ID.
	Tasks map[string]int64
}

// WorkflowInserter is implemented by backends that run workflows
// (pgqueue). A backend that cannot (kafkaqueue) implements it with an error
// wrapping ErrWorkflowsUnsupported, so a caller learns why at once.
type WorkflowInserter interface {
	// InsertWorkflow inserts p's tasks in one transaction: all of them or
	// none.
	InsertWorkflow(ctx context.Context, p WorkflowParams) (WorkflowResult, error)
}

// ErrWorkflowsUnsupported reports a backend that cannot run workflows:
// they need PostgreSQL (package pgqueue), whose transactions release a
// task's dependents with its fenced completion.
var ErrWorkflowsUnsupported = errors.New("jobfence: workflows need the PostgreSQL backend (pgqueue)")

// ErrInvalidWorkflow is wrapped by the error for a workflow that cannot be
// inserted as given: a task without a name, a name used twice, a
// dependency on a task the workflow lacks, a cycle.
var ErrInvalidWorkflow = errors.New("jobfence: invalid workflow")

// ErrWorkflowNotFound reports a workflow ID that names no workflow.
var ErrWorkflowNotFound = errors.New("jobfence: workflow not found")

// ErrNoOutput is wrapped by the error for reading the output of a task
// that did not complete (it was discarded or cancelled and its dependent
// ran anyway) or that recorded none.
var ErrNoOutput = errors.New("jobfence: no output")

// ErrNotAncestor is wrapped by the error for reading, from a task, the
// output of a task that is not among its ancestors (its dependencies,
// theirs, and so on): a sibling, a later task, or a name the workflow
// lacks. Such a task may not have run yet, and never will have for this
// task: retrying cannot help.
var ErrNotAncestor = errors.New("jobfence: not an ancestor of this task")

// ErrNotDependency is ErrNotAncestor, by its name before any ancestor's
// output could be read.
//
// Deprecated: use ErrNotAncestor.
var ErrNotDependency = ErrNotAncestor

// invalidWorkflow wraps ErrInvalidWorkflow with what is wrong.
func invalidWorkflow(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidWorkflow, fmt.Sprintf(format, a...))
}

// TopoOrder checks p's tasks (names present and unique, dependencies
// among them or in existing, no cycle) and returns their indexes in an
// order where every task follows the tasks of p it depends on. existing
// reports whether the workflow has a task of that name already.
func (p WorkflowParams) TopoOrder(existing func(name string) bool) ([]int, error) {
	index := make(map[string]int, len(p.Tasks))
	for i, t := range p.Tasks {
		switch {
		case t.Name == "":
			return nil, invalidWorkflow("task %d has no name", i)
		case existing != nil && existing(t.Name):
			return nil, invalidWorkflow("the workflow has a task named %q already", t.Name)
		}
		if _, dup := index[t.Name]; dup {
			return nil, invalidWorkflow("two tasks are named %q", t.Name)
		}
		if t.RunAnyway && t.RunOnFailure {
			return nil, invalidWorkflow("task %q sets both RunAnyway and RunOnFailure: a task runs whatever its dependencies' outcome, or only if one failed, not both", t.Name)
		}
		if t.RunOnFailure && len(t.DependsOn) == 0 {
			return nil, invalidWorkflow("task %q sets RunOnFailure without DependsOn: it would never run", t.Name)
		}
		if t.Params.UniqueKey != "" || t.Params.Unique != nil {
			return nil, invalidWorkflow("task %q has a unique key: a workflow's tasks cannot (a key taken by another job would leave its dependents waiting)", t.Name)
		}
		index[t.Name] = i
	}
	// Each task's dependencies among p's tasks, as indexes, looked up once:
	// task i's are deps[start[i]:start[i+1]]. A list is checked for a name
	// given twice against the names before it, or, when long (a fan-in's),
	// against a set.
	const shortList = 16
	start := make([]int, len(p.Tasks)+1)
	deps := make([]int, 0, len(p.Tasks))
	var seen map[string]bool
	for i, t := range p.Tasks {
		if len(t.DependsOn) > shortList {
			if seen == nil {
				seen = make(map[string]bool, len(t.DependsOn))
			}
			clear(seen)
		}
		for k, d := range t.DependsOn {
			var twice bool
			if len(t.DependsOn) > shortList {
				twice = seen[d]
				seen[d] = true
			} else {
				twice = slices.Contains(t.DependsOn[:k], d)
			}
			if twice {
				return nil, invalidWorkflow("task %q depends on %q twice", t.Name, d)
			}
			if j, ok := index[d]; ok {
				deps = append(deps, j)
			} else if existing == nil || !existing(d) {
				return nil, invalidWorkflow("task %q depends on %q, which the workflow has no task of", t.Name, d)
			}
		}
		start[i+1] = len(deps)
	}
	// Depth-first, so a cycle is found and named: stack holds the tasks
	// being visited, each depending on the one before.
	const (
		unseen = iota
		visiting
		done
	)
	mark := make([]uint8, len(p.Tasks))
	order := make([]int, 0, len(p.Tasks))
	var stack []int
	var visit func(i int) error
	visit = func(i int) error {
		switch mark[i] {
		case done:
			return nil
		case visiting:
			path := make([]string, 0, len(stack)+1)
			for _, s := range stack {
				path = append(path, p.Tasks[s].Name)
			}
			return invalidWorkflow("a cycle: %v", append(path, p.Tasks[i].Name))
		}
		mark[i] = visiting
		stack = append(stack, i)
		for _, j := range deps[start[i]:start[i+1]] {
			if err := visit(j); err != nil {
				return err
			}
		}
		stack = stack[:len(stack)-1]
		mark[i] = done
		order = append(order, i)
		return nil
	}
	for i := range p.Tasks {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// TaskResult is how a workflow task ended, as its dependent reads it
// (workflow.BatchMembers): its job, its state, what it recorded.
type TaskResult struct {
	// Name is the task's name in its workflow.
	Name string
	// JobID is the task's job.
	JobID int64
	// Kind is the job's kind.
	Kind string
	// State is the job's state: completed, discarded or cancelled once
	// the task ended; empty for a task gone from the database (pruned
	// after its retention).
	State State
	// Attempt is the job's last attempt.
	Attempt int
	// Output is what the task recorded (worker.RecordOutput), nil if
	// nothing.
	Output []byte
	// Error is the last error recorded on the job (the handler's, or the
	// reason it was cancelled), empty if none.
	Error string
}
