// Package netfault puts a TCP proxy on loopback between a client under test
// and a real server, so tests can break the network the way production
// breaks it: a link that goes silent without closing (a partition, a
// black-holed route), a server that refuses connections, a slow link.
package netfault

import (
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// Mode is what a Proxy does with the bytes and connections it gets.
type Mode int

const (
	// Forward copies bytes both ways, after the latency set with SetLatency.
	Forward Mode = iota
	// Stall black-holes every connection, old and new: nothing is
	// forwarded and nothing is closed, so neither side learns anything
	// until its own timeout. Bytes read meanwhile are held and forwarded
	// once the mode is Forward again.
	Stall
	// Refuse resets every open connection and each new one at once, as a
	// host whose server is down does.
	Refuse
	// StallReplies forwards what clients send but holds what the target
	// sends back, as a client that stopped reading does (SIGSTOP, a paused
	// VM, a full socket buffer): the target's sends block once the
	// sockets' buffers are full. Held bytes are forwarded once the mode is
	// Forward again.
	StallReplies
)

// Proxy is a TCP proxy from a loopback port to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	mode    Mode
	latency time.Duration
	changed chan struct{} // closed and replaced at every change of mode
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// New starts a proxy to target (host:port) in mode. It is closed when the
// test ends.
func New(t testing.TB, target string, mode Mode) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("netfault: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, mode: mode, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// TargetOf returns the host:port of rawURL (a postgres:// or redis:// URL,
// say), for New.
func TargetOf(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil || u.Port() == "" {
		t.Fatalf("netfault: %q has no host:port (%v)", rawURL, err)
	}
	return u.Host
}

// SetMode switches the proxy to m; see Mode.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.mode = m
	close(p.changed)
	p.changed = make(chan struct{})
	if m == Refuse {
		for c := range p.conns {
			reset(c)
		}
	}
}

// SetLatency delays every chunk of bytes forwarded, in each direction, by d.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.changed)
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.mode == Refuse || p.closed
		p.mu.Unlock()
		if refuse {
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve links the client c to a new connection to the target.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		reset(c)
		return
	}
	if !p.track(c, s) {
		c.Close()
		s.Close()
		return
	}
	defer p.untrack(c, s)
	var pumps sync.WaitGroup
	pumps.Go(func() { p.pump(s, c, false) })
	pumps.Go(func() { p.pump(c, s, true) })
	pumps.Wait()
}

// pump copies src to dst until either ends, holding each chunk while the
// proxy stalls (in this direction: reply is true for the target's bytes).
// An end of src is passed on only once the proxy forwards again: a stalled
// link says nothing, not even that the other side left.
func (p *Proxy) pump(dst, src net.Conn, reply bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		latency, ok := p.forwarding(reply)
		if !ok {
			return
		}
		if n > 0 {
			time.Sleep(latency)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// forwarding waits while the proxy stalls the direction (reply: the
// target's bytes); it reports the latency to apply, or false once the
// connection must end (Refuse or Close).
func (p *Proxy) forwarding(reply bool) (time.Duration, bool) {
	for {
		p.mu.Lock()
		mode, latency, changed, closed := p.mode, p.latency, p.changed, p.closed
		p.mu.Unlock()
		switch {
		case closed || mode == Refuse:
			return 0, false
		case mode == Forward, mode == StallReplies && !reply:
			return latency, true
		}
		<-changed
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == Refuse {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// reset closes c with a TCP RST rather than a FIN, as a refused or
// broken connection looks.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
