package depcheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/internal/usermod"
)

// foreign matches the import paths of the backends a PostgreSQL-only
// service must not link: the Kafka clients (kafka-go, franz-go and its
// kfake broker), the Redis client and SQLite, and jobfence's own packages
// for them.
var foreign = regexp.MustCompile(`(?i)kafka|redis|kfake|franz-go|sqlite|jobfence/stampede`)

// pgOnlyMain is a PostgreSQL-only service: the root client with telemetry,
// and the packages underneath it used alone.
const pgOnlyMain = `package main

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

type Ping struct{}

func (Ping) Kind() string { return "ping" }

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[Ping]) error { return nil })
	client, err := jobfence.NewClient(pool, jobfence.Config{
		Queues: map[string]int{"default": 10}, Handlers: reg, Telemetry: telemetry.Options{},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}

	// The packages underneath, used alone.
	var pgCfg pgqueue.Config
	if err := telemetry.PGQueue(&pgCfg, telemetry.Options{}); err != nil {
		log.Fatal(err)
	}
	cfg := worker.Config{Queues: map[string]int{"default": 10}}
	if err := telemetry.Worker(&cfg, telemetry.Options{}); err != nil {
		log.Fatal(err)
	}
	if _, err := worker.New(pgqueue.New(pool, pgCfg), worker.NewRegistry(), cfg); err != nil {
		log.Fatal(err)
	}
	var schedCfg scheduler.Config
	if err := telemetry.Scheduler(&schedCfg, telemetry.Options{}); err != nil {
		log.Fatal(err)
	}
}
`

// pgOnlyTest is the service's test, on jobfencetest's throwaway database.
const pgOnlyTest = `package main

import (
	"testing"

	"github.com/jobfence/jobfence/jobfencetest"
)

func TestMain(m *testing.M) { jobfencetest.Main(m) }
`

// TestPostgresOnlyServiceLinksNoOtherBackend builds a PostgreSQL-only
// service, with its test, in a fresh module that requires this checkout
// of jobfence, and lists what its binary and its test binary link.
func TestPostgresOnlyServiceLinksNoOtherBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in a module of its own: skipped with -short")
	}
	mod := newModule(t, map[string]string{"main.go": pgOnlyMain, "main_test.go": pgOnlyTest})
	usermod.Must(t, mod, "build", "-o", os.DevNull, ".")
	if bad := linkedForeign(t, mod); len(bad) > 0 {
		t.Errorf("a PostgreSQL-only service links %d packages of other backends:\n\t%s", len(bad), strings.Join(bad, "\n\t"))
	}
}

// TestTheCheckSeesAnotherBackend: the same check on a program that also
// reports Kafka and stampede metrics names their packages, so the test
// above would see them too.
func TestTheCheckSeesAnotherBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in a module of its own: skipped with -short")
	}
	mod := newModule(t, map[string]string{"main.go": `package main

import (
	_ "github.com/jobfence/jobfence/telemetry/kafkatelemetry"
	_ "github.com/jobfence/jobfence/telemetry/stampedetelemetry"
)

func main() {}
`})
	bad := strings.Join(linkedForeign(t, mod), " ")
	for _, want := range []string{"github.com/segmentio/kafka-go", "github.com/redis/go-redis/v9", "github.com/jobfence/jobfence/queue/kafkaqueue", "github.com/jobfence/jobfence/stampede"} {
		if !strings.Contains(bad, want+" ") && !strings.HasSuffix(bad, want) {
			t.Errorf("the check missed %s; it named: %s", want, bad)
		}
	}
}

// newModule makes a module, as a user's, holding files.
func newModule(t *testing.T, files map[string]string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	usermod.New(t, mod, "example.com/service", root)
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return mod
}

// linkedForeign lists, with go list -deps -test, the packages that the
// module's program and its tests link and foreign matches.
func linkedForeign(t *testing.T, mod string) []string {
	t.Helper()
	out, err := usermod.Go(mod, "list", "-deps", "-test", ".")
	if err != nil {
		t.Fatalf("go list -deps -test: %v\n%s", err, out)
	}
	var bad []string
	for p := range strings.FieldsSeq(string(out)) {
		if foreign.MatchString(p) {
			bad = append(bad, p)
		}
	}
	return bad
}
