// Package cpuclock reads the CPU time this process, and the whole machine,
// have used: benchmarks on a shared machine report it per operation, since
// other load disturbs it far less than it disturbs wall-clock rates, and
// the machine's share of busy time says whether a run was bound by CPU.
package cpuclock

import (
	"syscall"
	"time"
)

// Process is the user and system CPU time this process has used, every
// thread included (the garbage collector's and background goroutines'), or
// 0 if the system cannot tell.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
