package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
)

// holdHorizon opens a REPEATABLE READ transaction on dbURL and takes its
// snapshot at once, as a long report or a forgotten session would: while
// it stays open, vacuum can remove no row version that died after it
// began, so completed and claimed jobs' old versions pile up (the
// active_readers case of PostgreSQL job-queue benchmarks). The returned
// function ends the transaction.
func holdHorizon(ctx context.Context, dbURL string) (func(), error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("bench: horizon holder: %w", err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err == nil {
		// The snapshot is taken by the first statement, not by BEGIN.
		_, err = tx.Exec(ctx, "SELECT count(*) FROM jobfence_jobs")
	}
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("bench: horizon holder: %w", err)
	}
	return func() {
		_ = tx.Rollback(context.Background())
		conn.Close(context.Background())
	}, nil
}

// deadTuples is the n_dead_tup of the jobs table in schema.
func deadTuples(ctx context.Context, conn *pgx.Conn, schema string) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, `SELECT n_dead_tup FROM pg_stat_user_tables
		WHERE relid = $1::regclass`, pgx.Identifier{schema, "jobfence_jobs"}.Sanitize()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("bench: dead tuples: %w", err)
	}
	return n, nil
}

// withExecMode sets pgx's default_query_exec_mode on a connection URL;
// an empty mode leaves the URL as it is.
func withExecMode(dbURL, mode string) (string, error) {
	if mode == "" {
		return dbURL, nil
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("bench: parse the connection URL: %w", err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", mode)
	u.RawQuery = q.Encode()
	return u.String(), nil
}
