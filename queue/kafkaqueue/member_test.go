package kafkaqueue

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jobfence/jobfence/queue"
)

// handlerFunc runs one job and says how it ended.
type handlerFunc func(ctx context.Context, j *queue.Job) queue.Finish

// member is one group member driven by a small worker loop: it claims up to
// conc jobs, runs each in its own goroutine under a context that is
// cancelled when the backend revokes the job, and reports outcomes in
// batches.
type member struct {
	name   string
	b      *Backend
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	finished atomic.Int64 // outcomes applied
	stale    atomic.Int64 // outcomes returned as stale
	revoked  atomic.Int64 // jobs cancelled by a revoke
	errs     chan error
}

func startMember(t testing.TB, name string, cfg Config, q string, conc int, h handlerFunc) *member {
	t.Helper()
	b, err := NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{name: name, b: b, cancel: cancel, done: make(chan struct{}), errs: make(chan error, 16)}
	go m.loop(ctx, q, conc, h)
	t.Cleanup(m.close)
	return m
}

func (m *member) loop(ctx context.Context, q string, conc int, h handlerFunc) {
	defer close(m.done)
	wake, err := m.b.Wake(ctx, q)
	if err != nil {
		m.fail(err)
		return
	}
	cancelled, _ := m.b.Cancelled(ctx)
	results := make(chan queue.Finish, conc)
	running := map[int64]context.CancelFunc{}
	var wg sync.WaitGroup
	defer func() {
		for _, c := range running {
			c()
		}
		wg.Wait()
	}()
	for {
		if len(running) < conc {
			jobs, err := m.b.Claim(ctx, queue.ClaimParams{Queue: q, Limit: conc - len(running), WorkerID: m.name})
			if err != nil {
				if ctx.Err() == nil {
					m.fail(err)
				}
				return
			}
			for _, j := range jobs {
				jctx, jc := context.WithCancel(ctx)
				running[j.ID] = jc
				wg.Add(1)
				go func() {
					defer wg.Done()
					results <- h(jctx, j)
				}()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case l := <-cancelled:
			if c := running[l.ID]; c != nil {
				m.revoked.Add(1)
				c()
			}
		case f := <-results:
			batch := []queue.Finish{f}
		drain:
			for {
				select {
				case f := <-results:
					batch = append(batch, f)
				default:
					break drain
				}
			}
			for _, f := range batch {
				if c := running[f.ID]; c != nil {
					c()
					delete(running, f.ID)
				}
			}
			stale, err := m.b.Finish(ctx, batch)
			if err != nil && ctx.Err() == nil {
				m.fail(err)
			}
			m.stale.Add(int64(len(stale)))
			m.finished.Add(int64(len(batch) - len(stale)))
		}
	}
}

func (m *member) fail(err error) {
	select {
	case m.errs <- err:
	default:
	}
}

// close stops the loop (cancelling running jobs) and closes the backend.
func (m *member) close() {
	m.once.Do(func() {
		m.cancel()
		<-m.done
		m.b.Close()
	})
}

func (m *member) checkErrs(t testing.TB) {
	t.Helper()
	select {
	case err := <-m.errs:
		t.Fatalf("member %s: %v", m.name, err)
	default:
	}
}
