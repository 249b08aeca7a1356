package dashboard_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/sqlfreeze"
	"github.com/jobfence/jobfence/internal/txbound"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestFrozenMetricsReaderEnds: /metrics reads in a read-only transaction,
// whose snapshot keeps vacuum from removing the jobs' dead row versions
// and whose locks a migration's DDL waits for. The dashboard's client
// frozen before the commit (as a paused VM's is), the server ends the
// transaction within txbound.Idle. Before the fix it stayed open for as
// long as the freeze lasted.
func TestFrozenMetricsReaderEnds(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := pgqueue.New(db.Pool, pgqueue.Config{}).Enqueue(ctx, queue.EnqueueParams{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	fz := sqlfreeze.New(t, db.URL, 4)
	h := dashboard.New(fz.Pool, dashboard.Options{Logger: slog.New(slog.DiscardHandler)})
	fz.Arm(sqlfreeze.Point{Match: func(sql string) bool { return strings.Contains(sql, "'paused'") }})
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/metrics", nil))
	}()
	pid := fz.Frozen(t, 30*time.Second)
	sqlfreeze.WaitIdle(t, db.Pool, pid, txbound.Idle+3*time.Second)
	fz.Thaw()
	<-done
}
