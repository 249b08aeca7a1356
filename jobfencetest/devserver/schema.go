package devserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// Schema is a fresh PostgreSQL schema for one run of a program or one
// test, so that what it creates cannot meet anything else on the server.
type Schema struct {
	// Name is the schema's name.
	Name string
	// URL connects with Name first on the search_path.
	URL string

	base string
}

// CreateSchema creates a schema with a fresh name, prefix followed by
// random hex, on the server baseURL names. Drop removes it.
func CreateSchema(ctx context.Context, baseURL, prefix string) (*Schema, error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	c, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return nil, fmt.Errorf("devserver: connect %s: %w", pgqueue.RedactConnString(baseURL), pgqueue.RedactError(err, baseURL))
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("devserver: create schema %s: %w", name, err)
	}
	return &Schema{Name: name, URL: WithSearchPath(baseURL, name), base: baseURL}, nil
}

// Drop drops the schema and everything in it.
func (s *Schema) Drop(ctx context.Context) error {
	c, err := pgx.Connect(ctx, s.base)
	if err != nil {
		return fmt.Errorf("devserver: schema %s not dropped: %w", s.Name, pgqueue.RedactError(err, s.base))
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s.Name}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("devserver: drop schema %s: %w", s.Name, err)
	}
	return nil
}

// WithSearchPath returns the connection URL base with search_path set to
// schema, or base unchanged when it is not a URL (a key=value string).
func WithSearchPath(base, schema string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
