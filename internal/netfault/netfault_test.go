package netfault

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(l)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line and waits up to d for its echo.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) error {
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := r.ReadString('\n')
	return err
}

func TestProxyModes(t *testing.T) {
	p := New(t, echoServer(t), Forward)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatalf("forward: %v", err)
	}

	p.SetMode(Stall)
	if err := roundTrip(c, r, 300*time.Millisecond); err == nil {
		t.Fatal("an echo came through a stalled proxy")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("stalled: %v, want a timeout (the link must stay open)", err)
	}
	p.SetMode(Forward)
	// The line held during the stall arrives, then the next one.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("held line after the stall: %v", err)
	}
	if err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatalf("forward again: %v", err)
	}

	p.SetLatency(300 * time.Millisecond)
	start := time.Now()
	if err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 600*time.Millisecond {
		t.Fatalf("round trip with 300ms latency each way took %v", took)
	}
	p.SetLatency(0)

	p.SetMode(Refuse)
	if err := roundTrip(c, r, 10*time.Second); err == nil {
		t.Fatal("an open connection survived Refuse")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		err = roundTrip(c2, bufio.NewReader(c2), 10*time.Second)
		c2.Close()
	}
	if err == nil {
		t.Fatal("a new connection was served while refusing")
	}
	p.SetMode(Forward)
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := roundTrip(c3, bufio.NewReader(c3), 10*time.Second); err != nil {
		t.Fatalf("forward after refusing: %v", err)
	}
}

// TestStallReplies: what the client sends reaches the server, but the
// server's reply is held until the proxy forwards again.
func TestStallReplies(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		l, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return
		}
		got <- l
		_, _ = c.Write([]byte(l))
		time.Sleep(10 * time.Second)
	}()
	p := New(t, ln.Addr().String(), StallReplies)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if err := roundTrip(c, r, 300*time.Millisecond); err == nil {
		t.Fatal("a reply came back while replies were stalled")
	}
	select {
	case l := <-got:
		if l != "ping\n" {
			t.Fatalf("server got %q, want ping", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client's bytes did not reach the server while replies were stalled")
	}
	p.SetMode(Forward)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if l, err := r.ReadString('\n'); err != nil || l != "ping\n" {
		t.Fatalf("after Forward: %q, %v; want the held reply", l, err)
	}
}
