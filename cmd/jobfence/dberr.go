package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// connectError is a failure to connect to PostgreSQL told in one line: what
// went wrong, where. It unwraps to pgx's error.
type connectError struct {
	msg string
	err error
}

func (e *connectError) Error() string { return e.msg }
func (e *connectError) Unwrap() error { return e.err }

// explainDBError puts the reason first when err is a failure to connect to
// PostgreSQL. pgx reports every attempt in order, and with the default
// sslmode=prefer the first is the TLS attempt ("tls error: server refused
// TLS connection") even when the real problem is a missing database or a
// refused connection. Other errors are returned as they are.
func explainDBError(err error) error {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) || ce.Config == nil {
		return err
	}
	var (
		pgErr  *pgconn.PgError
		dnsErr *net.DNSError
		opErr  *net.OpError
		reason string
	)
	switch {
	case errors.As(err, &pgErr):
		reason = pgErr.Message
	case errors.As(err, &dnsErr):
		reason = "cannot resolve host " + strconv.Quote(dnsErr.Name) + ": " + dnsErr.Err
	case errors.As(err, &opErr):
		reason = innermost(opErr).Error()
	case errors.Is(err, context.DeadlineExceeded):
		reason = "timed out"
	default:
		return err
	}
	return &connectError{msg: fmt.Sprintf("cannot connect to PostgreSQL at %s: %s", address(ce.Config), reason), err: err}
}

// address is where cfg connects: host:port, or the Unix socket's directory.
func address(cfg *pgconn.Config) string {
	if strings.HasPrefix(cfg.Host, "/") {
		return cfg.Host
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// innermost returns the error at the end of err's chain ("connection
// refused" rather than "dial tcp 127.0.0.1:1: connect: connection refused").
func innermost(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
