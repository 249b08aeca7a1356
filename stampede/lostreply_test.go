package stampede

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobfence/jobfence/internal/redistest"
)

// replyDropper is a TCP proxy in front of the real Redis that, on a
// connection that sends a SET with NX, forwards the command but drops every
// reply from then on: the SET NX takes effect on the server while the client
// sees a timeout.
type replyDropper struct {
	ln      net.Listener
	target  string
	dropped atomic.Int64
	wg      sync.WaitGroup
}

func startReplyDropper(t *testing.T, target string) *replyDropper {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{ln: ln, target: target}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *replyDropper) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.handle(c) })
	}
}

func (p *replyDropper) handle(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	var drop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 && !drop.Load() {
				c.Write(buf[:n])
			}
			if err != nil {
				c.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if bytes.Contains(bytes.ToLower(buf[:n]), []byte("\r\nnx\r\n")) && !drop.Swap(true) {
				p.dropped.Add(1)
			}
			s.Write(buf[:n])
		}
		if err != nil {
			s.Close()
			<-done
			return
		}
	}
}

// TestSetNXReplyLost: a SET NX whose reply never came back is treated as
// possibly held. The value is computed directly and returned, and the lock is
// freed only by token: ours is removed, another holder's is left alone.
func TestSetNXReplyLost(t *testing.T) {
	redisClient, prefix := redistest.Client(t)
	addr := redisClient.Options().Addr
	for _, tt := range []struct {
		name      string
		otherLock bool // another caller holds the lock already
	}{
		{"lock was free, so the lost SET NX took it", false},
		{"lock was another's", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			proxy := startReplyDropper(t, addr)
			client := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String(), MaxRetries: -1, ReadTimeout: 300 * time.Millisecond})
			t.Cleanup(func() { client.Close() })
			key := t.Name()
			g := newGuard[string](t, client, prefix, Options{})
			lock := prefix + "stampede:lock:" + key
			if tt.otherLock {
				if err := redisClient.Set(t.Context(), lock, "other", time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}

			v, err := g.Get(t.Context(), key, time.Minute, func(context.Context) (string, error) { return "direct", nil })
			if err != nil || v != "direct" {
				t.Fatalf("Get = %q, %v; want the computed value and no error", v, err)
			}
			if proxy.dropped.Load() == 0 {
				t.Fatal("the proxy dropped no SET NX reply; the test did not test anything")
			}
			s := g.Stats()
			if s.RedisErrors == 0 || s.Computations != 1 || s.Waits != 0 {
				t.Fatalf("stats %+v; want a redis error, 1 computation, no wait", s)
			}
			owner, err := redisClient.Get(t.Context(), lock).Result()
			switch {
			case tt.otherLock && owner != "other":
				t.Fatalf("other's lock = %q, %v; want it untouched", owner, err)
			case !tt.otherLock && !errors.Is(err, redis.Nil):
				t.Fatalf("lock = %q, %v; the possibly held lock was ours and must be released", owner, err)
			}
			stored, err := redisClient.Get(t.Context(), prefix+"stampede:val:"+key).Bytes()
			if err != nil {
				t.Fatalf("value not stored: %v", err)
			}
			if e, err := decodeEntry(stored); err != nil || string(e.payload) != `"direct"` {
				t.Fatalf("stored entry %q, %v", stored, err)
			}
		})
	}
}
