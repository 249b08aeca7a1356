package dashboard

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// workflowsPage is /workflows' data.
type workflowsPage struct {
	Workflows []*pgqueue.WorkflowInfo
}

// workflows serves /workflows: the newest workflows with their progress.
func (h *handler) workflows(w http.ResponseWriter, r *http.Request) error {
	ws, err := h.client.ListWorkflows(r.Context(), time.Time{}, 100)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, "workflows", "Workflows", time.Time{}, workflowsPage{Workflows: ws})
}

// workflowPage is /workflows/{id}'s data.
type workflowPage struct {
	Workflow *pgqueue.WorkflowInfo
	Rows     []taskRow
	Graph    *graph
	// CanRetry says a task failed; CanCancel that some have not started.
	CanRetry, CanCancel bool
}

// taskRow is a task as the page's table shows it.
type taskRow struct {
	*pgqueue.Task
	DependsOn []string
	Took      string
}

// maxGraphTasks bounds the tasks the page draws: past it, the graph is
// left out (the table stays), since a drawing of thousands of boxes
// helps no one and costs the browser.
const maxGraphTasks = 200

// workflow serves /workflows/{id}: its tasks with states, durations and
// outputs, drawn as a graph (SVG rendered here, no script).
func (h *handler) workflow(w http.ResponseWriter, r *http.Request) error {
	wf, err := h.client.Workflow(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	names := map[int64]string{}
	for _, t := range wf.Tasks {
		names[t.ID] = t.TaskName
	}
	p := workflowPage{Workflow: wf}
	for _, t := range wf.Tasks {
		row := taskRow{Task: t, Took: "-"}
		for _, d := range t.DependsOn {
			row.DependsOn = append(row.DependsOn, names[d])
		}
		slices.Sort(row.DependsOn)
		if !t.FinalizedAt.IsZero() && !t.AttemptedAt.IsZero() {
			row.Took = t.FinalizedAt.Sub(t.AttemptedAt).Round(time.Millisecond).String()
		}
		switch t.State {
		case queue.StateDiscarded, queue.StateCancelled:
			p.CanRetry = true
		case queue.StatePending, queue.StateAvailable, queue.StateScheduled, queue.StateRetryable:
			p.CanCancel = true
		}
		p.Rows = append(p.Rows, row)
	}
	if len(wf.Tasks) <= maxGraphTasks {
		p.Graph = layout(wf.Tasks, h.opts.BasePath)
	}
	return h.render(w, r, http.StatusOK, "workflow", "Workflow "+wf.Name, time.Time{}, p)
}

// graph is a workflow drawn as SVG: tasks in columns by depth (the
// longest chain of dependencies before them), edges from each dependency
// to its dependents.
type graph struct {
	Width, Height int
	Nodes         []node
	Edges         []edge
}

type node struct {
	X, Y  int
	Name  string
	State queue.State
	Href  string
}

type edge struct {
	X1, Y1, X2, Y2 int
}

// The graph's geometry, in SVG user units.
const (
	nodeW, nodeH = 150, 36
	colGap       = 60
	rowGap       = 16
	margin       = 10
)

// layout places tasks (in ID order, so every dependency comes before its
// dependents) in columns by depth.
func layout(tasks []*pgqueue.Task, base string) *graph {
	depth := map[int64]int{}
	col := map[int][]*pgqueue.Task{}
	maxDepth := 0
	for _, t := range tasks {
		d := 0
		for _, dep := range t.DependsOn {
			if dd, ok := depth[dep]; ok && dd+1 > d {
				d = dd + 1
			}
		}
		depth[t.ID] = d
		col[d] = append(col[d], t)
		maxDepth = max(maxDepth, d)
	}
	g := &graph{}
	pos := map[int64][2]int{}
	rows := 0
	for d := 0; d <= maxDepth; d++ {
		for i, t := range col[d] {
			x, y := margin+d*(nodeW+colGap), margin+i*(nodeH+rowGap)
			pos[t.ID] = [2]int{x, y}
			g.Nodes = append(g.Nodes, node{X: x, Y: y, Name: t.TaskName, State: t.State, Href: fmt.Sprintf("%s/jobs/%d", base, t.ID)})
		}
		rows = max(rows, len(col[d]))
	}
	for _, t := range tasks {
		to := pos[t.ID]
		for _, dep := range t.DependsOn {
			from, ok := pos[dep]
			if !ok {
				continue
			}
			g.Edges = append(g.Edges, edge{X1: from[0] + nodeW, Y1: from[1] + nodeH/2, X2: to[0], Y2: to[1] + nodeH/2})
		}
	}
	g.Width = 2*margin + (maxDepth+1)*nodeW + maxDepth*colGap
	g.Height = 2*margin + rows*nodeH + max(rows-1, 0)*rowGap
	return g
}

func (h *handler) cancelWorkflow(r *http.Request, _ string) (string, []any, error) {
	id := r.PathValue("id")
	_, err := h.client.CancelWorkflow(r.Context(), id)
	return "/workflows/" + id + "?done=cancelled", []any{"workflow", id}, err
}

func (h *handler) retryWorkflow(r *http.Request, _ string) (string, []any, error) {
	id := r.PathValue("id")
	_, err := h.client.RetryWorkflow(r.Context(), id)
	return "/workflows/" + id + "?done=resumed", []any{"workflow", id}, err
}
