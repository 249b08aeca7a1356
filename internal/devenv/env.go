package devenv

import (
	"context"
	"os"
)

// Options says which services Start should provide.
type Options struct {
	// Postgres provides DatabaseURL.
	Postgres bool
	// Redis provides RedisURL.
	Redis bool
}

// Env holds the services' addresses: those named by DATABASE_URL and
// REDIS_URL when set, otherwise throwaway ones started by Start. A Kafka
// broker comes from package kafkaenv.
type Env struct {
	DatabaseURL string
	RedisURL    string

	stops []func()
}

// Start provides the services o asks for. Close stops the ones it started.
func Start(ctx context.Context, o Options) (*Env, error) {
	e := &Env{}
	if o.Postgres {
		if u := os.Getenv("DATABASE_URL"); u != "" {
			e.DatabaseURL = u
		} else {
			pg, err := StartPostgres(ctx)
			if err != nil {
				e.Close()
				return nil, err
			}
			e.DatabaseURL = pg.URL
			e.stops = append(e.stops, func() { pg.Stop() })
		}
	}
	if o.Redis {
		if u := os.Getenv("REDIS_URL"); u != "" {
			e.RedisURL = u
		} else {
			r, err := StartRedis(ctx)
			if err != nil {
				e.Close()
				return nil, err
			}
			e.RedisURL = r.URL
			e.stops = append(e.stops, func() { r.Stop() })
		}
	}
	return e, nil
}

// Close stops, in reverse order, the services Start started.
func (e *Env) Close() error {
	if e == nil {
		return nil
	}
	for i := len(e.stops) - 1; i >= 0; i-- {
		e.stops[i]()
	}
	e.stops = nil
	return nil
}
