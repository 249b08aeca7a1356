package model

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
)

// Kind names an operation.
type Kind string

// The operations. Each picks its target among the candidates present
// when it runs (Op.Pick modulo their number), so that an operation list
// stays meaningful when the shrinker removes operations before it.
const (
	OpInsert      Kind = "insert"      // Queue, Part, Ms (schedule), Deadline, Unique (Flag: a debounce), N (max attempts)
	OpWorkflow    Kind = "workflow"    // fan-out/fan-in A -> B, C -> D; D's policy (Op.Policy); Deadline: D's
	OpAppendOpen  Kind = "appendopen"  // open a caller tx and append a task to workflow Pick in it (its policy: Op.Policy)
	OpAppendEnd   Kind = "appendend"   // commit (Flag: roll back) the open append
	OpClaim       Kind = "claim"       // owner Owner claims up to N of Queue
	OpComplete    Kind = "complete"    // a live claim completes (Flag: with FinishTx in a transaction)
	OpFail        Kind = "fail"        // a live claim fails: retried after Ms (Flag: with FinishTx)
	OpDiscard     Kind = "discard"     // a live claim is discarded
	OpSnooze      Kind = "snooze"      // a live claim snoozes Ms (Flag: with FinishTx)
	OpPutBack     Kind = "putback"     // a live claim is put back (unknown kind), after Ms
	OpRateLimited Kind = "ratelimited" // a live claim's provider answers 429, Retry-After Ms (JobRateLimited)
	OpCancel      Kind = "cancel"      // Client.Cancel of job Pick (Flag: of workflow task Pick)
	OpRetry       Kind = "retry"       // Client.Retry of job Pick (Flag: of workflow task Pick)
	OpRetryForce  Kind = "retryforce"  // Client.RetryForce of job Pick (Flag: of workflow task Pick)
	OpPromote     Kind = "promote"     // Client.Promote (and its deadline sweep)
	OpGrant       Kind = "grant"       // Client.GrantWaiting
	OpRescue      Kind = "rescue"      // Client.Rescue of expired leases
	OpHeartbeat   Kind = "heartbeat"   // live owners extend their leases
	OpSleep       Kind = "sleep"       // Ms pass
	OpSetLimit    Kind = "setlimit"    // limit Pick gets concurrency 1+N%3; N 3: the fair limit gets 1+Pick%3
	OpDeleteLimit Kind = "deletelimit" // limit Pick is deleted
	OpPause       Kind = "pause"       // Queue is paused
	OpResume      Kind = "resume"      // Queue is resumed
	OpStep        Kind = "step"        // a live claim records step "s<N%3>" (jobfence.Step's record)
	OpAwait       Kind = "await"       // a live claim waits for the signal, Ms+1 ms at most; none there: it suspends awaiting it
	OpSignal      Kind = "signal"      // Client.Signal of job Pick (Flag: of workflow task Pick), payload N
	OpBatch       Kind = "batch"       // owner Owner claims up to N of Queue as a batch handler's worker does, and reports the outcomes of all its claims (stale ones too) in one Finish, mixed by Pick
	// Faults.
	OpExpire    Kind = "expire"    // the lease of claim Pick (any owner's) runs out
	OpFreeze    Kind = "freeze"    // Owner stops: no heartbeat, no writes
	OpThaw      Kind = "thaw"      // Owner resumes and writes its claims' outcomes, stale or not
	OpKill      Kind = "kill"      // Owner dies: its claims are abandoned
	OpTerminate Kind = "terminate" // the client's backends are terminated
)

// Op is one operation: plain values, written and read as JSON.
type Op struct {
	Kind     Kind `json:"op"`
	Queue    int  `json:"q,omitempty"`
	Part     int  `json:"part,omitempty"`
	Pick     int  `json:"pick,omitempty"`
	Owner    int  `json:"owner,omitempty"`
	Ms       int  `json:"ms,omitempty"`
	Deadline int  `json:"deadline,omitempty"`
	Unique   int  `json:"unique,omitempty"`
	N        int  `json:"n,omitempty"`
	Flag     bool `json:"flag,omitempty"`
}

// IsFault reports whether o is a fault rather than an ordinary operation.
func (o Op) IsFault() bool {
	switch o.Kind {
	case OpExpire, OpFreeze, OpKill, OpTerminate:
		return true
	}
	return false
}

// String is o as one line of JSON, as an operation file holds it.
func (o Op) String() string {
	b, _ := json.Marshal(o)
	return string(b)
}

// FormatOps is ops, one JSON object a line: an operation file.
func FormatOps(ops []Op) string {
	var b strings.Builder
	for _, o := range ops {
		b.WriteString(o.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// ReadOps reads an operation file written by FormatOps.
func ReadOps(path string) ([]Op, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model: read ops: %w", err)
	}
	var ops []Op
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var o Op
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			return nil, fmt.Errorf("model: ops line %d: %w", i+1, err)
		}
		ops = append(ops, o)
	}
	return ops, nil
}

// weighted is the generator's mix: how often each operation is drawn.
// Claims and outcomes dominate, so that jobs move; faults are rare enough
// that the system gets between them.
var weighted = []struct {
	k Kind
	w int
}{
	{OpInsert, 22}, {OpWorkflow, 4}, {OpAppendOpen, 1}, {OpAppendEnd, 2},
	{OpClaim, 16}, {OpComplete, 10}, {OpFail, 6}, {OpDiscard, 1}, {OpSnooze, 3}, {OpPutBack, 2}, {OpRateLimited, 2},
	{OpCancel, 1}, {OpRetry, 3}, {OpRetryForce, 2},
	{OpPromote, 6}, {OpGrant, 3}, {OpRescue, 3}, {OpHeartbeat, 2}, {OpSleep, 5},
	{OpSetLimit, 2}, {OpDeleteLimit, 1}, {OpPause, 1}, {OpResume, 1},
	{OpStep, 3}, {OpAwait, 2}, {OpSignal, 2}, {OpBatch, 4},
	{OpExpire, 3}, {OpFreeze, 1}, {OpThaw, 2}, {OpKill, 1}, {OpTerminate, 1},
}

// Generate draws n operations from seed: the same seed gives the same list.
func Generate(seed uint64, n int) []Op {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	total := 0
	for _, w := range weighted {
		total += w.w
	}
	ops := make([]Op, 0, n)
	for range n {
		x := r.IntN(total)
		var k Kind
		for _, w := range weighted {
			if x < w.w {
				k = w.k
				break
			}
			x -= w.w
		}
		ops = append(ops, draw(r, k))
	}
	return ops
}

// Policy is the failure policy of the task an OpWorkflow (its D) or an
// OpAppendOpen inserts: N 1 (or Flag, as operation lists written before
// RunOnFailure have it) runs anyway, N 2 runs only on a failure, else
// neither.
func (o Op) Policy() (runAnyway, runOnFailure bool) {
	return o.Flag || o.N == 1, !o.Flag && o.N == 2
}

// draw fills an operation of kind k with random values in the ranges the
// runner reads them in.
func draw(r *rand.Rand, k Kind) Op {
	o := Op{Kind: k, Pick: r.IntN(1000), Owner: r.IntN(owners)}
	switch k {
	case OpInsert:
		// Not the workflows' queue.
		if o.Queue = r.IntN(len(world) - 1); world[o.Queue].name == "wf" {
			o.Queue = len(world) - 1
		}
		// Half the jobs share partition 0, so that they meet in it.
		if o.Part = r.IntN(2 * partitions); o.Part >= partitions {
			o.Part = 0
		}
		if r.IntN(5) == 0 {
			o.Ms = 50 + r.IntN(600)
		}
		if r.IntN(4) == 0 {
			o.Deadline = o.Ms + 100 + r.IntN(1500)
		}
		if r.IntN(6) == 0 {
			o.Unique = 1 + r.IntN(5)
			o.Flag = r.IntN(2) == 0
		}
		o.N = 1 + r.IntN(4)
	case OpWorkflow:
		// None, run anyway or run only on a failure, a third each.
		o.N = r.IntN(3)
		if r.IntN(4) == 0 {
			o.Deadline = 200 + r.IntN(1500)
		}
	case OpAppendOpen:
		o.N = r.IntN(3)
	case OpAppendEnd:
		o.Flag = r.IntN(5) == 0
	case OpClaim:
		o.Queue = r.IntN(len(world))
		o.N = 1 + r.IntN(3)
	case OpBatch:
		o.Queue = r.IntN(len(world))
		o.N = 2 + r.IntN(4)
	case OpComplete:
		o.Flag = r.IntN(3) == 0
	case OpFail, OpSnooze, OpPutBack:
		if r.IntN(3) > 0 {
			o.Ms = r.IntN(300)
		}
		o.Flag = k != OpPutBack && r.IntN(3) == 0
	case OpRateLimited:
		o.Ms = 50 + r.IntN(550)
	case OpSleep:
		o.Ms = 20 + r.IntN(400)
	case OpCancel, OpRetry, OpRetryForce:
		o.Flag = r.IntN(5) < 3
	case OpSetLimit:
		o.N = r.IntN(4)
	case OpStep, OpSignal:
		o.N = r.IntN(100)
		o.Flag = k == OpSignal && r.IntN(4) == 0
	case OpAwait:
		o.Ms = r.IntN(400)
	case OpPause, OpResume:
		o.Queue = r.IntN(len(world))
	}
	return o
}
