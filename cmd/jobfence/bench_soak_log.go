package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"
)

// autovacuumLog follows a PostgreSQL server's log for the autovacuum passes
// of one table, which the server logs with their durations when the
// table's log_autovacuum_min_duration is 0. pg_stat_user_tables counts the
// passes and stamps the last one's end, but says nothing of how long it
// took; sampling pg_stat_progress_vacuum would miss passes shorter than its
// period and round the rest to it. The log has each pass's own figure.
type autovacuumLog struct {
	path string
	// suffix ends the quoted "database.schema.table" name of the table's
	// passes in the log.
	suffix []byte
	// offset is where the next read starts: past the last complete
	// message read, or at the start of a pass's message not yet complete.
	offset int64
	// passes is the table's passes found since the follower started;
	// last is the last one's duration.
	passes int64
	last   time.Duration
}

// autovacuumLogRead bounds one read of the log, so that a log grown large
// is followed over several reads rather than held in memory at once.
const autovacuumLogRead = 16 << 20

// followAutovacuumLog follows the log at path from its end, for the passes
// of schema's jobs table.
func followAutovacuumLog(path, schema string) (*autovacuumLog, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("bench: the server's log: %w", err)
	}
	return &autovacuumLog{path: path, suffix: []byte("." + schema + ".jobfence_jobs"), offset: fi.Size()}, nil
}

// read reads what the server has logged since the last read.
func (l *autovacuumLog) read() error {
	f, err := os.Open(l.path)
	if err != nil {
		return fmt.Errorf("bench: the server's log: %w", err)
	}
	defer f.Close()
	for {
		data, err := io.ReadAll(io.NewSectionReader(f, l.offset, autovacuumLogRead))
		if err != nil {
			return fmt.Errorf("bench: read the server's log: %w", err)
		}
		n := l.scan(data)
		l.offset += int64(n)
		// A full read with no whole line in it (never seen) is not read
		// again and again.
		if len(data) < autovacuumLogRead || n == 0 {
			return nil
		}
	}
}

var (
	// PostgreSQL 15's vacuumlazy.c starts the message so; the table is
	// database.schema.table, unquoted inside the quotes.
	autovacuumHeader = regexp.MustCompile(`automatic (?:aggressive )?vacuum (?:to prevent wraparound )?of table "([^"]*)"`)
	// pg_rusage_show's "elapsed: 1.23 s", on the message's "system usage"
	// line.
	autovacuumElapsed = regexp.MustCompile(`^\tsystem usage: .*elapsed: ([0-9]+(?:\.[0-9]+)?) s`)
)

// scan counts the table's passes whose messages data holds whole, and
// returns how much of data it is done with: up to its last whole line, or
// up to the start of a pass's message whose end has not been written yet.
// A message's lines after its first begin with a tab.
func (l *autovacuumLog) scan(data []byte) int {
	done := 0
	for {
		loc := autovacuumHeader.FindSubmatchIndex(data[done:])
		if loc == nil {
			if i := bytes.LastIndexByte(data[done:], '\n'); i >= 0 {
				done += i + 1
			}
			return done
		}
		headerStart := done + loc[0]
		table := data[done+loc[2] : done+loc[3]]
		rest := done + loc[1]
		// The rest of the header's line, then its continuation lines.
		nl := bytes.IndexByte(data[rest:], '\n')
		if nl < 0 {
			return lineStart(data, headerStart)
		}
		pos := rest + nl + 1
		var elapsed []byte
		complete := false
		for {
			nl := bytes.IndexByte(data[pos:], '\n')
			if nl < 0 {
				// The message may go on in what is not written yet.
				break
			}
			line := data[pos : pos+nl]
			if len(line) == 0 || line[0] != '\t' {
				// The next message: this one ended without a duration.
				complete = true
				break
			}
			pos += nl + 1
			if m := autovacuumElapsed.FindSubmatch(line); m != nil {
				elapsed, complete = m[1], true
				break
			}
		}
		if !complete {
			return lineStart(data, headerStart)
		}
		if elapsed != nil && bytes.HasSuffix(table, l.suffix) {
			if d, err := time.ParseDuration(string(elapsed) + "s"); err == nil {
				l.passes++
				l.last = d
			}
		}
		done = pos
	}
}

// lineStart is the start of the line holding data[i].
func lineStart(data []byte, i int) int {
	return bytes.LastIndexByte(data[:i], '\n') + 1
}
