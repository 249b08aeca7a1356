package queue_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jobfence/jobfence/queue"
)

// fanOut is a workflow of one root, n tasks that depend on it, and one
// task that depends on all n: the shape of `jobfence bench --mode fanout`.
func fanOut(n int) queue.WorkflowParams {
	p := queue.WorkflowParams{Name: "fan"}
	p.Tasks = append(p.Tasks, queue.WorkflowTask{Name: "root"})
	sum := queue.WorkflowTask{Name: "sum"}
	for i := range n {
		name := fmt.Sprintf("t%d", i)
		p.Tasks = append(p.Tasks, queue.WorkflowTask{Name: name, DependsOn: []string{"root"}})
		sum.DependsOn = append(sum.DependsOn, name)
	}
	// The fan-in first: the order must put it last all the same.
	p.Tasks = append([]queue.WorkflowTask{sum}, p.Tasks...)
	return p
}

// TestTopoOrder: every task follows the tasks it depends on, each task
// once; a cycle is named along its path; a dependency listed twice, an
// unknown one and a name taken are refused, each with its message.
func TestTopoOrder(t *testing.T) {
	p := fanOut(100)
	order, err := p.TopoOrder(nil)
	if err != nil {
		t.Fatal(err)
	}
	pos := make(map[string]int, len(order))
	for k, i := range order {
		pos[p.Tasks[i].Name] = k
	}
	if len(order) != len(p.Tasks) || len(pos) != len(p.Tasks) {
		t.Fatalf("order has %d entries over %d distinct tasks, want each of the %d once", len(order), len(pos), len(p.Tasks))
	}
	for _, tk := range p.Tasks {
		for _, d := range tk.DependsOn {
			if pos[d] >= pos[tk.Name] {
				t.Fatalf("task %q at %d does not follow its dependency %q at %d", tk.Name, pos[tk.Name], d, pos[d])
			}
		}
	}
	task := func(name string, deps ...string) queue.WorkflowTask {
		return queue.WorkflowTask{Name: name, DependsOn: deps}
	}
	long := fanOut(40).Tasks // the fan-in's list is long: checked against a set
	long[0].DependsOn = append(long[0].DependsOn, "t3")
	for _, tt := range []struct {
		name  string
		tasks []queue.WorkflowTask
		taken []string
		want  string
	}{
		{"cycle", []queue.WorkflowTask{task("a", "c"), task("b", "a"), task("c", "b")}, nil, "a cycle: [a c b a]"},
		{"cycle below", []queue.WorkflowTask{task("x"), task("a", "x", "b"), task("b", "a")}, nil, "a cycle: [a b a]"},
		{"twice", []queue.WorkflowTask{task("a"), task("b", "a", "a")}, nil, `task "b" depends on "a" twice`},
		{"twice in a long list", long, nil, `task "sum" depends on "t3" twice`},
		{"unknown", []queue.WorkflowTask{task("a", "z")}, nil, `task "a" depends on "z", which the workflow has no task of`},
		{"taken", []queue.WorkflowTask{task("a")}, []string{"a"}, `the workflow has a task named "a" already`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := queue.WorkflowParams{Name: "w", Tasks: tt.tasks}.TopoOrder(func(n string) bool { return slices.Contains(tt.taken, n) })
			if !errors.Is(err, queue.ErrInvalidWorkflow) || err.Error() != "jobfence: invalid workflow: "+tt.want {
				t.Fatalf("TopoOrder = %v, want ErrInvalidWorkflow: %s", err, tt.want)
			}
		})
	}
}

// BenchmarkTopoOrder orders a fan-out of 10,000 tasks into one, as a
// workflow's insert does before its statements.
func BenchmarkTopoOrder(b *testing.B) {
	p := fanOut(10000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.TopoOrder(nil); err != nil {
			b.Fatal(err)
		}
	}
}
