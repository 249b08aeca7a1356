package kafkaqueue

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// pauser freezes every connection dialed through its dialer, as a stopped
// process would: nothing is sent or received until resume.
type pauser struct {
	mu sync.Mutex
	ch chan struct{} // non-nil while paused
}

func (p *pauser) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil {
		p.ch = make(chan struct{})
	}
}

func (p *pauser) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil {
		close(p.ch)
		p.ch = nil
	}
}

func (p *pauser) wait() {
	p.mu.Lock()
	ch := p.ch
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (p *pauser) dialer() *kafka.Dialer {
	return &kafka.Dialer{
		Timeout: 10 * time.Second,
		DialFunc: func(ctx context.Context, network, addr string) (net.Conn, error) {
			p.wait()
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &pausedConn{Conn: c, p: p}, nil
		},
	}
}

type pausedConn struct {
	net.Conn
	p *pauser
}

func (c *pausedConn) Read(b []byte) (int, error) {
	c.p.wait()
	n, err := c.Conn.Read(b)
	c.p.wait()
	return n, err
}

func (c *pausedConn) Write(b []byte) (int, error) {
	c.p.wait()
	return c.Conn.Write(b)
}
