package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// openClient connects to dbURL and checks that jobfence's tables are
// there, so that an unmigrated database is told as such (run `jobfence
// migrate up`) rather than as a missing relation. The client logs nothing:
// commands print what they did. The caller closes the pool.
func openClient(ctx context.Context, dbURL string) (*pgqueue.Client, *pgxpool.Pool, error) {
	if dbURL == "" {
		return nil, nil, errors.New("no database: pass --database-url or set DATABASE_URL")
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, nil, err
	}
	c := pgqueue.New(pool, pgqueue.Config{Logger: slog.New(slog.DiscardHandler)})
	if err := c.Check(ctx); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, pool, nil
}
