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
