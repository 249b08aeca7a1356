package jobfence_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/pgtest"
)

// TestPoolConfigSizesForQueues: the pool that PoolConfig sizes gives a
// client built as README.md's sample (50 slots, a transactional handler)
// a first run with no pool warning, where pgxpool's default size logs
// one.
func TestPoolConfigSizesForQueues(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	queues := map[string]int{"default": 50}
	newLogged := func(pool *pgxpool.Pool) string {
		t.Helper()
		var logs bytes.Buffer
		reg := jobfence.NewRegistry()
		jobfence.AddHandlerTx(reg, func(ctx context.Context, tx pgx.Tx, job *jobfence.Job[record]) error { return nil })
		c, err := jobfence.NewClient(pool, jobfence.Config{
			Queues: queues, Handlers: reg,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		if err != nil || c == nil {
			t.Fatalf("NewClient: %v", err)
		}
		return logs.String()
	}

	cfg, err := jobfence.PoolConfig(db.URL, queues)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxConns != 52 {
		t.Errorf("MaxConns %d, want 52: 50 handlers and the 2 connections reserved", cfg.MaxConns)
	}
	sized, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sized.Close()
	if logs := newLogged(sized); logs != "" {
		t.Errorf("a client on PoolConfig's pool logged: %s", logs)
	}

	plain, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if logs := newLogged(plain); !strings.Contains(logs, "fewer pool connections than concurrency") {
		t.Errorf("a client on pgxpool's default pool logged %q; want the warning PoolConfig avoids", logs)
	}
}

// TestPoolConfig: MaxConns is raised, never lowered; bad input is refused
// with a message that says what is wrong.
func TestPoolConfig(t *testing.T) {
	t.Parallel()
	const url = "postgres://u@localhost:5432/db"
	def, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		url    string
		queues map[string]int
		want   int32
	}{
		{"insert-only keeps the default", url, nil, def.MaxConns},
		{"queues add up", url, map[string]int{"a": 10, "b": 5}, 17},
		{"a larger pool stays", url + "?pool_max_conns=100", map[string]int{"a": 10}, 100},
		{"a smaller one grows", url + "?pool_max_conns=3", map[string]int{"a": 10}, 12},
	} {
		cfg, err := jobfence.PoolConfig(tc.url, tc.queues)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if cfg.MaxConns != tc.want {
			t.Errorf("%s: MaxConns %d, want %d", tc.name, cfg.MaxConns, tc.want)
		}
	}
	for _, tc := range []struct {
		url    string
		queues map[string]int
		want   string
	}{
		{url, map[string]int{"default": 10, "mail": 0}, `jobfence: pool config: queue "mail" has concurrency 0: want 1 or more`},
		{"postgres://u@localhost:notaport/db", nil, "jobfence: pool config: "},
		{url, map[string]int{"a": 1 << 30, "b": 1 << 30}, "more than a pool holds"},
	} {
		if _, err := jobfence.PoolConfig(tc.url, tc.queues); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PoolConfig(%q, %v): %v, want an error containing %q", tc.url, tc.queues, err, tc.want)
		}
	}
}
