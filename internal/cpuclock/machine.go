package cpuclock

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Machine is the CPU time this machine's processors have spent, as the
// kernel counts it since boot: a benchmark that subtracts two readings
// learns what everything on the machine (PostgreSQL, PgBouncer, other
// processes) spent meanwhile, and whether the processors were saturated,
// which one process's CPU time cannot say.
type Machine struct {
	// Busy is time spent running anything: user, nice, system, irq and
	// softirq.
	Busy time.Duration
	// Idle is time with nothing to run, I/O waits included.
	Idle time.Duration
	// Steal is time the hypervisor gave this machine's processors to
	// another guest: on a shared host it is capacity the machine never had.
	Steal time.Duration
	// CPUs is the number of processors counted.
	CPUs int
}

// userHZ is the unit of /proc/stat's counters: the kernel exports them in
// USER_HZ, which is 100 on every Linux architecture Go supports.
const userHZ = 100

// ReadMachine reads the machine's CPU times from /proc/stat. It fails
// where there is no /proc/stat (systems other than Linux).
func ReadMachine() (Machine, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Machine{}, fmt.Errorf("cpuclock: %w", err)
	}
	return parseStat(b)
}

// parseStat reads the aggregate "cpu" line and counts the "cpuN" lines.
func parseStat(b []byte) (Machine, error) {
	var m Machine
	found := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 0 || !bytes.HasPrefix(f[0], []byte("cpu")) {
			continue
		}
		if len(f[0]) > 3 {
			m.CPUs++
			continue
		}
		// user nice system idle iowait irq softirq steal: the guest
		// columns after them are already counted in user and nice.
		if len(f) < 9 {
			return Machine{}, fmt.Errorf("cpuclock: /proc/stat's cpu line has %d fields, want at least 9", len(f))
		}
		var v [8]int64
		for i := range v {
			n, err := strconv.ParseInt(string(f[i+1]), 10, 64)
			if err != nil {
				return Machine{}, fmt.Errorf("cpuclock: /proc/stat's cpu line: %w", err)
			}
			v[i] = n
		}
		tick := time.Second / userHZ
		m.Busy = time.Duration(v[0]+v[1]+v[2]+v[5]+v[6]) * tick
		m.Idle = time.Duration(v[3]+v[4]) * tick
		m.Steal = time.Duration(v[7]) * tick
		found = true
	}
	if !found {
		return Machine{}, fmt.Errorf("cpuclock: /proc/stat has no cpu line")
	}
	return m, nil
}

// Since is what the machine spent from an earlier reading to m.
func (m Machine) Since(earlier Machine) Machine {
	return Machine{Busy: m.Busy - earlier.Busy, Idle: m.Idle - earlier.Idle, Steal: m.Steal - earlier.Steal, CPUs: m.CPUs}
}

// BusyShare is the fraction of the processors' time spent running
// something, steal counted as time they did not have: near 1, the machine
// was saturated and any CPU added to a job costs rate.
func (m Machine) BusyShare() float64 { return m.share(m.Busy) }

// StealShare is the fraction of the processors' time the hypervisor gave
// to other guests.
func (m Machine) StealShare() float64 { return m.share(m.Steal) }

// share is d's fraction of all the processors' time, or 0 for none.
func (m Machine) share(d time.Duration) float64 {
	total := m.Busy + m.Idle + m.Steal
	if total <= 0 {
		return 0
	}
	return float64(d) / float64(total)
}
