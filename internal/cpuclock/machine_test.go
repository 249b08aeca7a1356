package cpuclock

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	stat := "cpu  475814 248 99722 535517 7503 0 7183 1491 0 0\n" +
		"cpu0 234126 141 49109 274136 2509 0 2614 757 0 0\n" +
		"cpu1 241687 107 50613 261381 4994 0 4569 733 0 0\n" +
		"intr 17260906 0 0\nctxt 41369657\n"
	m, err := parseStat([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	want := Machine{
		Busy:  (475814 + 248 + 99722 + 0 + 7183) * 10 * time.Millisecond,
		Idle:  (535517 + 7503) * 10 * time.Millisecond,
		Steal: 1491 * 10 * time.Millisecond,
		CPUs:  2,
	}
	if m != want {
		t.Fatalf("parsed %+v, want %+v", m, want)
	}
	d := m.Since(Machine{Busy: m.Busy - time.Second, Idle: m.Idle - time.Second, Steal: m.Steal, CPUs: 2})
	if got := d.BusyShare(); got != 0.5 {
		t.Fatalf("one second busy, one idle: busy share %v, want 0.5", got)
	}
	if got := (Machine{}).BusyShare(); got != 0 {
		t.Fatalf("no time at all: busy share %v, want 0", got)
	}
}

func TestParseStatRefusesWhatItCannotRead(t *testing.T) {
	for stat, want := range map[string]string{
		"intr 1 2 3\n":           "no cpu line",
		"cpu  1 2 3 4\n":         "has 5 fields, want at least 9",
		"cpu  1 2 x 4 5 6 7 8\n": `parsing "x"`,
	} {
		if _, err := parseStat([]byte(stat)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one saying %q", stat, err, want)
		}
	}
}

// TestReadMachineCountsBusyWork checks the live counters: busy work shows
// as busy time.
func TestReadMachineCountsBusyWork(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/stat is Linux's")
	}
	m0, err := ReadMachine()
	if err != nil {
		t.Fatal(err)
	}
	if m0.CPUs < 1 {
		t.Fatalf("counted %d processors", m0.CPUs)
	}
	deadline := time.Now().Add(200 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	m1, err := ReadMachine()
	if err != nil {
		t.Fatal(err)
	}
	if busy := m1.Since(m0).Busy; busy < 100*time.Millisecond {
		t.Fatalf("200 ms of busy work: the machine counted %v busy", busy)
	}
}
