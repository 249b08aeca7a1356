package devenv

import (
	"fmt"
	"testing"
)

// TestStartingPostgresAsksForItsPackageOnly: with redis-server missing
// (nothing on PATH), starting PostgreSQL asks apt-get for nothing, where
// it asked for redis-server too and failed on a machine without Debian's
// package lists (the bench on a machine without Redis).
func TestStartingPostgresAsksForItsPackageOnly(t *testing.T) {
	if _, ok := postgresBinDir(); !ok {
		t.Skip("no PostgreSQL installed: run jobfence setup")
	}
	t.Setenv("PATH", t.TempDir())
	for _, tt := range []struct {
		s    servers
		want string
	}{
		{servers{postgres: true}, "[]"},
		{servers{redis: true}, "[redis-server]"},
		{servers{postgres: true, redis: true}, "[redis-server]"},
	} {
		if got := fmt.Sprint(tt.s.missing()); got != tt.want {
			t.Errorf("%+v: missing %s, want %s", tt.s, got, tt.want)
		}
	}
}
