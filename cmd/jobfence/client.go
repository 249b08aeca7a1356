package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

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

// closeWait bounds how long a command waits, as it ends, for the wake-ups
// and releases its client left to finish in the background.
const closeWait = 5 * time.Second

// closeClient ends a command's client: it waits, closeWait at most, for
// the wake-ups of the jobs the command made ready (a limit's grant, a
// release) that its client sends in the background, and for the releases
// it runs there, then closes the client and its pool. Closing the pool
// first would cut them short: the workers would find those jobs only at
// their next poll.
func closeClient(c *pgqueue.Client, pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	_ = c.WaitReleases(ctx)
	c.Close()
	pool.Close()
}
