package stampede

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/redistest"
)

// TestNilInterfaceValue: a computed nil of an interface type is a value,
// not a panic.
func TestNilInterfaceValue(t *testing.T) {
	client, prefix := redistest.Client(t)
	g := newGuard[any](t, client, prefix, Options{})
	for range 2 { // computed, then read back from Redis
		v, err := g.Get(context.Background(), "k", time.Minute, func(context.Context) (any, error) { return nil, nil })
		if err != nil || v != nil {
			t.Fatalf("Get = %v, %v; want nil, nil", v, err)
		}
	}
}
