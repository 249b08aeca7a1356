// Package devenv starts throwaway PostgreSQL and Redis servers from the
// system's binaries for tests, benchmarks and the demo. Every server lives in
// its own temporary directory, listens on loopback on a free port and is
// removed by Stop.
//
// When the binaries are missing and the process runs as root, Install puts
// them in place from Debian's packages; otherwise it returns an error that
// says what to install.
package devenv
