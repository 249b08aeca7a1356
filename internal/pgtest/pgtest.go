// Package pgtest is the project's own use of jobfencetest's test database:
// the same schema per test, plus the bound on hung tests that the
// project's tests share (testwatch).
package pgtest

import (
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/jobfencetest/devserver"
)

// Main runs the tests of a package; see jobfencetest.Main. A test binary
// without a server fails rather than skips.
func Main(m *testing.M) { jobfencetest.Main(m) }

// DB is a schema of its own for one test; see jobfencetest.DB.
type DB = jobfencetest.DB

// Options tunes New; see jobfencetest.Options.
type Options = jobfencetest.Options

// HangLimit bounds each test that calls New. The slowest test takes about a
// minute on two busy cores.
const HangLimit = 10 * time.Minute

// New creates a migrated schema for t, as jobfencetest.NewDB does. A test
// (not a benchmark) that takes a schema is bounded by HangLimit, its
// cleanups included: see testwatch.Bound.
func New(t testing.TB, opts ...Options) *DB {
	t.Helper()
	if _, ok := t.(*testing.T); ok {
		testwatch.Bound(t, HangLimit)
	}
	return jobfencetest.NewDB(t, opts...)
}

// WithSearchPath returns the connection URL with search_path set to schema.
func WithSearchPath(base, schema string) string { return devserver.WithSearchPath(base, schema) }
