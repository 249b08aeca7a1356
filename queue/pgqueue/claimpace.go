package pgqueue

import (
	"sync"
	"time"
)

// Claims start after the queue's claim position and read from its start
// only now and then (see claimSQL). headInterval is how often: at least
// every headIntervalMin, or headIntervalClaims times the client's last
// claim's duration if that is longer. In a fleet of 20 instances on one
// server a claim of 1,000 jobs took 250 ms and more, so with a fixed
// 250 ms every claim came after the interval and read from the start,
// through every entry of the jobs claimed since the last VACUUM (27,000
// buffers a claim).
//
// A claim that comes back short reads from the start in the same call,
// unless any claim of the queue did within headRetryInterval: a worker
// with room does not leave a job before the position waiting, and the
// instances of a fleet whose queue runs dry do not each walk the index's
// start on every claim.
const (
	headIntervalMin    = 250 * time.Millisecond
	headIntervalClaims = 4
	headRetryInterval  = 20 * time.Millisecond
)

// claimPace is what a client knows of its claims of one queue.
type claimPace struct {
	mu   sync.Mutex
	took time.Duration
}

// headInterval is how long after any claim read from the queue's start
// the next claim does.
func (p *claimPace) headInterval() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(headIntervalMin, headIntervalClaims*p.took)
}

// claimed records how long a claim took.
func (p *claimPace) claimed(took time.Duration) {
	p.mu.Lock()
	p.took = took
	p.mu.Unlock()
}

// paces holds a client's claim paces by queue. The zero value is ready.
type paces struct {
	mu sync.Mutex
	m  map[string]*claimPace
}

func (ps *paces) get(q string) *claimPace {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.m[q]
	if p == nil {
		if ps.m == nil {
			ps.m = make(map[string]*claimPace)
		}
		p = &claimPace{}
		ps.m[q] = p
	}
	return p
}
