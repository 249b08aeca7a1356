package devenv

import (
	"fmt"
	"net"
)

// freePort asks the kernel for a free loopback port. Another process may take
// it before the server binds; callers retry on a bind failure.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("devenv: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// onFreePort calls start with a free loopback port until it succeeds, five
// tries at most, since another process may take the port before the server
// binds it. It returns the port start succeeded on, or the last error.
func onFreePort(start func(port int) error) (int, error) {
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err == nil {
			if err = start(port); err == nil {
				return port, nil
			}
		}
		lastErr = err
	}
	return 0, lastErr
}
