// Package devserver gives a program the servers jobfence needs when none is
// configured: the ones DATABASE_URL and REDIS_URL name, or throwaway ones
// started from the system's binaries (PostgreSQL and redis-server, in a
// temporary directory on loopback), removed by Close. A Kafka-protocol
// broker comes from package devserver/devkafka, apart so that a program
// that starts only PostgreSQL links no Kafka code.
//
// It is for examples, local development and tests, never production: the
// throwaway PostgreSQL runs with fsync off. It is a package of its own, not
// part of jobfencetest, so that a program using it does not link the
// testing package. Package jobfencetest starts its test server through it.
package devserver

import (
	"context"
	"fmt"

	"github.com/jobfence/jobfence/internal/devenv"
)

// ErrNotInstalled is wrapped by Start's error when a server's binaries are
// missing and cannot be installed (the process is not root, or there is no
// apt-get); the message names the Debian packages to install.
var ErrNotInstalled = devenv.ErrNotInstalled

// Options says which servers Start provides. All default to false.
type Options struct {
	// Postgres provides Env.DatabaseURL: DATABASE_URL, or a throwaway
	// PostgreSQL server connected to as its superuser.
	Postgres bool
	// Redis provides Env.RedisURL: REDIS_URL, or a throwaway redis-server.
	Redis bool
}

// Env holds the servers' addresses.
type Env struct {
	// DatabaseURL connects to PostgreSQL when Options.Postgres was set.
	DatabaseURL string
	// RedisURL connects to Redis when Options.Redis was set.
	RedisURL string

	env *devenv.Env
}

// Start provides the servers o asks for, starting those the environment
// does not name. Starting PostgreSQL takes a few seconds. Close stops
// what Start started.
func Start(ctx context.Context, o Options) (*Env, error) {
	e, err := devenv.Start(ctx, devenv.Options{Postgres: o.Postgres, Redis: o.Redis})
	if err != nil {
		return nil, fmt.Errorf("devserver: %w", err)
	}
	return &Env{DatabaseURL: e.DatabaseURL, RedisURL: e.RedisURL, env: e}, nil
}

// Close stops the servers Start started and removes their files; the
// servers the environment named are left alone. Calling it twice is safe.
func (e *Env) Close() error {
	if e == nil {
		return nil
	}
	return e.env.Close()
}
