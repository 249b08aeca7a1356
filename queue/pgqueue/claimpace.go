package pgqueue

import (
	"sync"
	"time"
)

// Claims start after the queue's claim position and read from its start
// only now and then (see claimSQL). headInterval is how often: at least
// every headIntervalMin, or headIntervalClaims times the client's last
// claim's duration if that is longer: in a fleet, claims can take longer
// than a fixed interval, and then every claim would read from the start,
// through every entry of the jobs claimed since the last VACUUM
// (docs/benchmarks/code.md).
//
// A claim that would come back short also reads the position's band
// before the position, in the same statement (claimSQL's wrap), unless any
// claim of the queue read from the start within headRetryInterval: a
// worker with room does not leave a job before the position waiting, and
// the instances of a fleet whose queue runs dry do not each walk the
// index's start on every claim. The interval is twice the client's last
// claim's duration, from headRetryMin to headRetryMax: a job that
// committed after later ones (concurrent producers commit out of their
// scheduled_at and id order all the time) waits about two claims for it,
// not a fixed interval that would set the tail of enqueue-to-start latency
// on a fast server, and fleet-wide there are at most a few such walks per
// claim's duration.
const (
	headIntervalMin    = 250 * time.Millisecond
	headIntervalClaims = 4
	headRetryMin       = 2 * time.Millisecond
	headRetryMax       = 20 * time.Millisecond
	headRetryClaims    = 2
)

// A claim's reply carries its jobs' rows when it took at most
// claimInlineJobs jobs whose rows come to at most claimInlineBytes (see
// claimSQL): far below what the sockets between the server and a claimer
// hold (a TCP socket's send buffer starts at 16 kB and its receive buffer
// at 128 kB on Linux, a Unix socket holds about 200 kB) and below the
// 22 kB of the one-row reply of a claim of 1,000, which the same
// guarantee already rests on.
const (
	claimInlineJobs  = 32
	claimInlineBytes = 16 << 10
)

// claimTurns is how many turns a queue's claims take: claims of one turn
// run one at a time across the fleet, a client's claims that run at once
// (its worker's fetch loops) each take a turn of their own. In a fleet,
// whose claims are slow, each instance sends one claim at a time (see
// worker.Config.Fetchers), so the instances take turns; a single
// instance's two fetch loops still overlap their claims.
const claimTurns = 2

// claimTurnWait bounds how long a claim waits for its turn: past it, the
// claim runs beside the one that holds the turn. A turn is held only
// while the server runs a claim (a claim commits without waiting for its
// claimer, see claimSQL), so the bound matters only when that server
// session is itself stuck.
const claimTurnWait = time.Second

// claimPace is what a client knows of its claims of one queue.
type claimPace struct {
	mu   sync.Mutex
	took time.Duration
	// busy are the turns this client's claims hold.
	busy [claimTurns]bool
}

// turn returns a turn no claim of this client holds, and own true: give
// it back with done. When the client's claims hold every turn, it returns
// the first, shared, and own false.
func (p *claimPace) turn() (t int, own bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, b := range p.busy {
		if !b {
			p.busy[i] = true
			return i, true
		}
	}
	return 0, false
}

// done gives back a turn that turn reported as the claim's own.
func (p *claimPace) done(t int) {
	p.mu.Lock()
	p.busy[t] = false
	p.mu.Unlock()
}

// headInterval is how long after any claim read from the queue's start
// the next claim does.
func (p *claimPace) headInterval() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(headIntervalMin, headIntervalClaims*p.took)
}

// headRetryInterval is how long after any claim read from the queue's
// start a claim that would come back short reads before the position.
func (p *claimPace) headRetryInterval() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return min(headRetryMax, max(headRetryMin, headRetryClaims*p.took))
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
