package model_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/model"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/jobfencetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// shortRunSeed is the first seed of the short run when -seed is not
// given.
const shortRunSeed = 1

var (
	seedFlag         = flag.Uint64("seed", 0, "first seed of the model test (0: 1 in the short run, drawn from the time with -duration, and printed)")
	opsFlag          = flag.Int("ops", 250, "operations per seed")
	durationFlag     = flag.Duration("duration", 0, "run seeds until this much time has passed (0: the short run of -seeds seeds)")
	seedsFlag        = flag.Int("seeds", 3, "seeds of the short run")
	replayFlag       = flag.String("replay", "", "replay the operation file FILE (as a failure printed it) instead of generating")
	shrinkFlag       = flag.Duration("shrink", 0, "how long a failure's shrinking may take (0: a minute in the short run, 5 in a long one)")
	triesFlag        = flag.Int("tries", 1, "replays of each cut while shrinking: a cut fails if any fails (more for a failure that depends on timing)")
	shrinkReplayFlag = flag.Bool("shrinkreplay", false, "shrink a failing -replay list further")
	skipFlag         = flag.String("skip", "", "comma-separated rules whose violations are counted, not failed: known defects set aside")
	parallelFlag     = flag.Int("parallel", 1, "seeds run at once, each on a schema of its own (a run waits on the server and its sleeps far more than it computes)")
)

// skip is -skip as a set.
func skip() map[string]bool {
	m := map[string]bool{}
	for _, r := range strings.Split(*skipFlag, ",") {
		if r = strings.TrimSpace(r); r != "" {
			m[r] = true
		}
	}
	return m
}

// runFresh runs ops on a fresh migrated schema.
func runFresh(t *testing.T, ops []model.Op) model.Result {
	t.Helper()
	res, err := runIn(context.Background(), ops)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// runIn is runFresh for any goroutine: it returns its error.
func runIn(ctx context.Context, ops []model.Op) (model.Result, error) {
	db, err := jobfencetest.OpenDB(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return model.Result{}, err
	}
	defer db.Close()
	return model.Run(ctx, model.Env{URL: db.URL, Admin: db.Pool, Skip: skip()}, ops)
}

// TestModel drives random operations and faults from seeds against real
// PostgreSQL beside the reference model, checking the invariants after
// every step (see package model). The short run, in make test, is a few
// seeds of a few hundred operations; make model runs seeds for
// -duration. A violation prints its seed and the shortest operation list
// shrinking found, written to a file that -replay runs again.
func TestModel(t *testing.T) {
	// The bound grows with the run's size, so that a long run of many
	// seeds (-seeds) is not cut short by the short run's bound.
	bound := 10*time.Minute + time.Duration(*seedsFlag**opsFlag)*10*time.Millisecond
	if *durationFlag > 0 {
		bound = *durationFlag + 15*time.Minute
	}
	testwatch.Bound(t, bound)
	if *replayFlag != "" {
		ops, err := model.ReadOps(*replayFlag)
		if err != nil {
			t.Fatal(err)
		}
		res := runFresh(t, ops)
		t.Logf("replayed %d operations (%d faults, %d starts, %d stale writes refused)", res.Stats.Ops, res.Stats.Faults, res.Stats.Starts, res.Stats.StaleRefused)
		if res.Violation != nil && *shrinkReplayFlag {
			report(t, 0, ops, res.Violation)
		}
		if res.Violation != nil {
			t.Fatalf("violation: %v", res.Violation)
		}
		return
	}
	seed := *seedFlag
	switch {
	case seed == 0 && *durationFlag == 0:
		// The short run in make test replays the same seeds every time,
		// so that CI judges the code, not the draw; make model explores.
		seed = shortRunSeed
	case seed == 0:
		seed = uint64(time.Now().UnixNano() % 1e9)
	}
	t.Logf("first seed %d (replay: go test ./internal/model -run TestModel -args -seed=%d -ops=%d)", seed, seed, *opsFlag)
	began := time.Now()
	total, failed := runSeeds(t, seed, began)
	if failed != nil {
		report(t, failed.seed, failed.ops, failed.v)
		return
	}
	t.Logf("%d operations and %d faults from %d seeds (%d starts, %d inserts, %d debounced, %d stale writes refused, %d suspensions, %d signals, %d batches of outcomes, %d calls failed by faults, %d jobs drained, %d violations of skipped rules) in %v: no violation",
		total.Ops, total.Faults, total.Ops / *opsFlag, total.Starts, total.Inserts, total.Debounced, total.StaleRefused, total.Suspended, total.Signals, total.Batches, total.Tolerated, total.Drained, total.Skipped, time.Since(began).Round(time.Second))
	if total.Skipped > 0 {
		t.Logf("skipped violations by rule: %v", total.SkippedBy)
		for rule, first := range total.SkippedFirst {
			t.Logf("first %s: %s", rule, first)
		}
	}
}

// failedSeed is a seed whose run broke an invariant.
type failedSeed struct {
	seed uint64
	ops  []model.Op
	v    *model.Violation
}

// runSeeds runs seeds from first, -parallel at a time, until -duration
// has passed since began (or, without it, -seeds of them), and returns
// what they drove and the lowest seed that failed, if any: a failure
// stops the seeds not begun yet. Each minute it logs how far it got, so
// that a long run stopped early still says what it drove.
func runSeeds(t *testing.T, first uint64, began time.Time) (model.Stats, *failedSeed) {
	var (
		mu     sync.Mutex
		total  model.Stats
		failed *failedSeed
		next   = first
		wg     sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	take := func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		done := *durationFlag > 0 && time.Since(began) >= *durationFlag ||
			*durationFlag == 0 && next >= first+uint64(*seedsFlag)
		if failed != nil || done {
			return 0, false
		}
		next++
		return next - 1, true
	}
	go func() {
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				mu.Lock()
				t.Logf("%v: %d operations, %d faults, seeds %d-%d begun", time.Since(began).Round(time.Second), total.Ops, total.Faults, first, next-1)
				mu.Unlock()
			}
		}
	}()
	for range max(1, *parallelFlag) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				s, ok := take()
				if !ok {
					return
				}
				ops := model.Generate(s, *opsFlag)
				res, err := runIn(ctx, ops)
				mu.Lock()
				switch {
				case err != nil && ctx.Err() == nil:
					t.Errorf("seed %d: %v", s, err)
				case err == nil:
					for rule, first := range res.Stats.SkippedFirst {
						res.Stats.SkippedFirst[rule] = fmt.Sprintf("seed %d %s", s, first)
					}
					total.Add(res.Stats)
					if res.Violation != nil && (failed == nil || s < failed.seed) {
						failed = &failedSeed{seed: s, ops: ops, v: res.Violation}
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return total, failed
}

// shrinkFor is -shrink, or its default for the run.
func shrinkFor() time.Duration {
	switch {
	case *shrinkFlag > 0:
		return *shrinkFlag
	case *durationFlag > 0:
		return 5 * time.Minute
	}
	return time.Minute
}

// report shrinks a failing list and fails the test with the seed, the
// shortest list found and the command that replays it.
func report(t *testing.T, seed uint64, ops []model.Op, v *model.Violation) {
	t.Helper()
	t.Logf("seed %d: violation at step %d: %v", seed, v.Step, v)
	cut := ops[:min(v.Step+1, len(ops))]
	short, runs := model.Shrink(cut, func(c []model.Op) bool {
		for range max(1, *triesFlag) {
			if res := runFresh(t, c); res.Violation != nil && res.Violation.Rule == v.Rule {
				return true
			}
		}
		return false
	}, 200, time.Now().Add(shrinkFor()))
	last := runFresh(t, short)
	file := filepath.Join(os.TempDir(), fmt.Sprintf("jobfence-model-%d.ops", seed))
	if err := os.WriteFile(file, []byte(model.FormatOps(short)), 0o644); err != nil {
		t.Log(err)
	}
	t.Fatalf("seed %d: %s violated; shrunk in %d replays from %d to %d operations:\n%s\nlast replay: %v\nreplay: go test ./internal/model -run TestModel -args -replay=%s\nor the whole run: go test ./internal/model -run TestModel -args -seed=%d -seeds=1 -ops=%d",
		seed, v.Rule, runs, len(ops), len(short), model.FormatOps(short), last.Violation, file, seed, len(ops))
}

// TestModelCases replays the operation lists under testdata: each is a
// shrunk failure the model test found (or one written the same way for a
// known defect), kept so that it runs in every go test, as a fuzz
// target's corpus does. Each file's comment names the rule it broke.
func TestModelCases(t *testing.T) {
	testwatch.Bound(t, 10*time.Minute)
	files, err := filepath.Glob(filepath.Join("testdata", "*.ops"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/*.ops")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".ops"), func(t *testing.T) {
			ops, err := model.ReadOps(f)
			if err != nil {
				t.Fatal(err)
			}
			if res := runFresh(t, ops); res.Violation != nil {
				t.Fatalf("%v\nreplay: go test ./internal/model -run TestModel -args -replay=%s", res.Violation, f)
			}
		})
	}
}
