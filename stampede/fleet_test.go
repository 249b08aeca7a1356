package stampede

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobfence/jobfence/internal/redistest"
)

// The fleet test re-runs the test binary as child processes; this variable
// holds the key prefix in a child.
const fleetChildEnv = "STAMPEDE_FLEET_CHILD_PREFIX"

const (
	fleetProcesses = 4
	fleetCallers   = 250 // per process
)

// fleetResult is what a child process reports on a line of its own.
type fleetResult struct {
	Stats  Stats
	Values []string // distinct values its callers got
	Errors []string
}

// TestFleetColdKey runs 4 processes of 250 goroutines each, every process
// with its own Guard and Redis client, on one cold key; they rendezvous on a
// start time so that they really race. The key must be computed once.
func TestFleetColdKey(t *testing.T) {
	if prefix := os.Getenv(fleetChildEnv); prefix != "" {
		fleetChild(t, prefix)
		return
	}
	client, prefix := redistest.Client(t)
	ctx := t.Context()

	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, fleetProcesses)
	errs := make([]error, fleetProcesses)
	for i := range fleetProcesses {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFleetColdKey$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), fleetChildEnv+"="+prefix)
		cmd.Stdout = &outs[i]
		cmd.Stderr = &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[i] = cmd.Wait() })
	}
	// Rendezvous: once every child is ready, give them one start time a
	// little ahead.
	until(t, "all children are ready", func() bool {
		n, _ := client.Get(ctx, prefix+"ready").Int()
		return n == fleetProcesses
	})
	start := time.Now().Add(200 * time.Millisecond).UnixNano()
	if err := client.Set(ctx, prefix+"start", start, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	var total Stats
	values := map[string]bool{}
	for i := range fleetProcesses {
		if errs[i] != nil {
			t.Fatalf("child %d: %v\n%s", i, errs[i], outs[i].String())
		}
		r, err := parseFleetResult(outs[i].Bytes())
		if err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i].String())
		}
		if len(r.Errors) > 0 {
			t.Fatalf("child %d: Get errors %v", i, r.Errors)
		}
		for _, v := range r.Values {
			values[v] = true
		}
		total.Calls += r.Stats.Calls
		total.Computations += r.Stats.Computations
		total.Waits += r.Stats.Waits
		total.FailOpens += r.Stats.FailOpens
	}
	computed, _ := client.Get(ctx, prefix+"computed").Int()
	t.Logf("fleet stats: calls %d, computations %d, waits %d, fail-opens %d", total.Calls, total.Computations, total.Waits, total.FailOpens)
	if computed != 1 || total.Computations != 1 {
		t.Fatalf("computed %d times (Stats.Computations %d); want 1", computed, total.Computations)
	}
	if len(values) != 1 {
		t.Fatalf("callers got %d distinct values %v; want 1", len(values), values)
	}
	if total.Calls != fleetProcesses*fleetCallers || total.FailOpens != 0 {
		t.Fatalf("calls %d, fail-opens %d; want %d calls and none", total.Calls, total.FailOpens, fleetProcesses*fleetCallers)
	}
}

func parseFleetResult(out []byte) (fleetResult, error) {
	var r fleetResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "FLEET-RESULT "); ok {
			return r, json.Unmarshal([]byte(line), &r)
		}
	}
	return r, fmt.Errorf("no FLEET-RESULT line")
}

// fleetChild is one process of TestFleetColdKey.
func fleetChild(t *testing.T, prefix string) {
	ctx := t.Context()
	opt, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opt)
	defer client.Close()
	g := newGuard[string](t, client, prefix, Options{WaitTimeout: time.Minute})

	if err := client.Incr(ctx, prefix+"ready").Err(); err != nil {
		t.Fatal(err)
	}
	var start int64
	until(t, "the start time is set", func() bool {
		start, err = client.Get(ctx, prefix+"start").Int64()
		return err == nil
	})
	time.Sleep(time.Until(time.Unix(0, start)))

	compute := func(ctx context.Context) (string, error) {
		if err := client.Incr(ctx, prefix+"computed").Err(); err != nil {
			return "", err
		}
		time.Sleep(100 * time.Millisecond) // an expensive computation
		return "computed by pid " + strconv.Itoa(os.Getpid()), nil
	}
	var (
		mu     sync.Mutex
		result fleetResult
		seen   = map[string]bool{}
		wg     sync.WaitGroup
	)
	for range fleetCallers {
		wg.Go(func() {
			v, err := g.Get(ctx, "cold", time.Minute, compute)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				result.Errors = append(result.Errors, err.Error())
			} else if !seen[v] {
				seen[v] = true
				result.Values = append(result.Values, v)
			}
		})
	}
	wg.Wait()
	result.Stats = g.Stats()
	b, _ := json.Marshal(result)
	fmt.Printf("FLEET-RESULT %s\n", b)
}
