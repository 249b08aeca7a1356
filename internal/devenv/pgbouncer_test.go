package devenv

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStartPgBouncerBadOptions(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		o    PgBouncerOptions
		want string
	}{
		{PgBouncerOptions{}, "no upstream server"},
		{PgBouncerOptions{Upstream: "127.0.0.1"}, `upstream "127.0.0.1"`},
		{PgBouncerOptions{Upstream: "127.0.0.1:5432", Users: []string{"a b"}}, `name "a b": use letters, digits and underscores`},
		{PgBouncerOptions{Upstream: "127.0.0.1:5432", Database: "x\ny"}, `name "x\ny"`},
	} {
		_, err := StartPgBouncer(ctx, tt.o)
		if !errors.Is(err, ErrBadPgBouncerOptions) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want ErrBadPgBouncerOptions saying %q", tt.o, err, tt.want)
		}
	}
}

// TestStartPgBouncerStop: PgBouncer accepts connections on its port once
// StartPgBouncer returns (it connects upstream only when a client logs
// in), and Stop closes the port and removes its directory.
func TestStartPgBouncerStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := InstallPgBouncer(ctx); errors.Is(err, ErrNotInstalled) {
		t.Skipf("PgBouncer is needed: %v", err)
	}
	b, err := StartPgBouncer(ctx, PgBouncerOptions{Upstream: "127.0.0.1:1", Users: []string{"app"}, PoolSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port))
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		b.Stop()
		t.Fatalf("PgBouncer does not accept connections: %v", err)
	}
	c.Close()
	if u := b.URL("app"); !strings.Contains(u, "app@"+addr+"/postgres") || !strings.Contains(u, "default_query_exec_mode="+ExecMode) {
		t.Errorf("URL %q", u)
	}
	b.Stop()
	if _, err := os.Stat(b.Dir); !os.IsNotExist(err) {
		t.Errorf("Stop left %s: %v", b.Dir, err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("PgBouncer still accepts connections after Stop")
	}
}
