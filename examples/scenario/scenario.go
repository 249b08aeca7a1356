// Package scenario is what the example programs under examples/ and the
// `jobfence demo` command share, so that each scenario is written once.
//
// Each scenario is a package beside its example's main.go
// (examples/inventory/shop, examples/paused-worker/paused, ...) with a Run
// function that plays the scenario and measures it as a Result: the
// attempts, the effects read back from where they are stored, and the
// invariant. The example's main.go runs it through Main, on the servers
// DATABASE_URL, REDIS_URL and KAFKA_BROKERS name or on throwaway ones;
// `jobfence demo` runs the same Run functions one after another and prints
// a verdict table.
//
// Why packages the demo imports, rather than the demo running the example
// programs: an installed jobfence binary has no example sources to run,
// and `go run` would compile nine programs per demo. Why a package per
// example rather than one for all: a user who copies one example's
// directory into their module gets its scenario's code with it (and points
// main.go's import at the copy); only this small harness stays imported.
package scenario

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Env is what a scenario runs on.
type Env struct {
	// DatabaseURL connects to a migrated database whose search_path is a
	// schema of the run's own, and Pool is a pool on it.
	DatabaseURL string
	Pool        *pgxpool.Pool
	// RedisURL and KafkaBrokers are set for the scenarios that need them.
	RedisURL     string
	KafkaBrokers []string
	// Logger receives the library's logs; nil discards them.
	Logger *slog.Logger
	// Progress prints one line about the scenario's progress; nil discards.
	Progress func(format string, args ...any)
	// WorkerProcess returns the command that runs a worker process of
	// queue q (see RunShipWorker), for the scenarios that pause or kill
	// one; its stdin and stdout are the caller's to connect.
	WorkerProcess func(ctx context.Context, q string) *exec.Cmd
}

// Logf prints a progress line.
func (e *Env) Logf(format string, args ...any) {
	if e.Progress != nil {
		e.Progress(format, args...)
	}
}

// Log returns Logger, or one that discards.
func (e *Env) Log() *slog.Logger {
	if e.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Logger
}

// NewPool opens a pool of its own on DatabaseURL, as another instance of
// the service would have.
func (e *Env) NewPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.DatabaseURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Result is what a scenario measured. It passes when Effects equals
// WantEffects and Problems is empty.
type Result struct {
	// Attempted counts the attempts to take effect: fires, requests,
	// handler runs, reads.
	Attempted int64
	// Effects counts the effects that took effect, read back from where
	// they are stored.
	Effects int64
	// WantEffects is how many effects the scenario's invariant allows.
	WantEffects int64
	// Rejected counts the attempts refused or absorbed: duplicates by an
	// idempotency key, stale writes by a fence, readers by the lock.
	Rejected int64
	// Problems lists every other invariant that failed.
	Problems []string
}

// Verdict is "PASS", or "FAIL: " and why.
func (r Result) Verdict() string {
	switch {
	case r.Effects != r.WantEffects:
		return fmt.Sprintf("FAIL: %d effects, want %d", r.Effects, r.WantEffects)
	case len(r.Problems) > 0:
		return "FAIL: " + strings.Join(r.Problems, "; ")
	}
	return "PASS"
}

// Print writes r as the closing lines of an example program.
func (r Result) Print(w io.Writer) {
	fmt.Fprintf(w, "attempted %d, took effect %d (want %d), rejected %d: %s\n",
		r.Attempted, r.Effects, r.WantEffects, r.Rejected, r.Verdict())
}

// WaitUntil polls cond every 50ms until it holds, ctx ends or d passes.
func WaitUntil(ctx context.Context, d time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", d, what)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
