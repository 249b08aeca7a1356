package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/devenv"
	"github.com/jobfence/jobfence/migrations"
)

// startPrivatePostgres starts a server of the test's own, for tests that
// take the database down.
func startPrivatePostgres(t *testing.T) *devenv.Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := devenv.StartPostgres(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop() })
	if err := migrations.Up(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	return pg
}
