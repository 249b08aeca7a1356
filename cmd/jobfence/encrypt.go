package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// Environment variables that give the CLI the encryption keys: in the
// environment rather than in flags, so that no key shows in a process
// list or a shell's history.
const (
	// keysEnv lists the keys as ID=BASE64 pairs separated by commas:
	// k1=...,k2=... (standard base64 of 32 bytes each).
	keysEnv = "JOBFENCE_ENCRYPTION_KEYS"
	// currentEnv names the current key; default the last one of keysEnv.
	currentEnv = "JOBFENCE_ENCRYPTION_CURRENT"
	// macKeyEnv names the key of the unique hash (Encryption.MACKey).
	macKeyEnv = "JOBFENCE_ENCRYPTION_MAC_KEY"
)

// keyRingFromEnv returns the key ring that keysEnv, currentEnv and
// macKeyEnv describe, or nil when keysEnv is unset. Its errors name the
// variable and the key ID at fault, never a key's value.
func keyRingFromEnv() (*queue.KeyRing, error) {
	spec := strings.TrimSpace(os.Getenv(keysEnv))
	if spec == "" {
		return nil, nil
	}
	e := queue.Encryption{Keys: map[string][]byte{}, Current: os.Getenv(currentEnv), MACKey: os.Getenv(macKeyEnv)}
	last := ""
	for i, pair := range strings.Split(spec, ",") {
		id, b64, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return nil, fmt.Errorf("%s: entry %d is not ID=BASE64", keysEnv, i+1)
		}
		if _, dup := e.Keys[id]; dup {
			return nil, fmt.Errorf("%s: key %q is given twice", keysEnv, id)
		}
		k, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("%s: key %q is not standard base64", keysEnv, id)
		}
		e.Keys[id], last = k, id
	}
	if e.Current == "" {
		e.Current = last
	}
	r, err := queue.NewKeyRing(e)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keysEnv, err)
	}
	return r, nil
}

// shownArgs returns a job's args as a viewer holding ring (which may be
// nil) sees them, as JSON: the plaintext when ring opens them, else the
// JSON string "encrypted (key ID)".
func shownArgs(ring *queue.KeyRing, kind string, args []byte) json.RawMessage {
	key, sealed := queue.SealedKey(args)
	if !sealed {
		return args
	}
	if ring != nil {
		if plain, err := ring.Open(kind, args); err == nil {
			return plain
		}
	}
	b, _ := json.Marshal(queue.DescribeSealed(key))
	return b
}

// argsText is shownArgs for a line of text: "encrypted (key ID)" bare.
func argsText(ring *queue.KeyRing, kind string, args []byte) string {
	if key, sealed := queue.SealedKey(args); sealed {
		if ring != nil {
			if plain, err := ring.Open(kind, args); err == nil {
				return string(plain)
			}
		}
		return queue.DescribeSealed(key)
	}
	return string(args)
}

func runEncrypt(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("encrypt", flag.ContinueOnError)
	fs.SetOutput(stderr)
	databaseURL := databaseURLFlag(fs)
	batch := fs.Int("batch", pgqueue.DefaultRotateBatch, "rotate: jobs read (and rewritten) per statement, in each table")
	after := fs.Int64("after", 0, "rotate: resume after this job ID (the cursor a stopped run printed)")
	passes := fs.Int("passes", 3, "rotate: passes at most, until one finds nothing left under an old key")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence encrypt [--database-url URL] [--batch N] [--after ID] [--passes N] rotate")
		fmt.Fprintf(stderr, "The keys come from %s (ID=BASE64,...), %s (default: the last listed) and %s (default: the current key).\n", keysEnv, currentEnv, macKeyEnv)
		fs.PrintDefaults()
	}
	action, rest, err := parseAction(fs, args, "rotate")
	if err != nil {
		return err
	}
	if action != "rotate" || len(rest) > 0 {
		fs.Usage()
		return fmt.Errorf("unknown encrypt action %q: want rotate", strings.Join(append([]string{action}, rest...), " "))
	}
	if *batch <= 0 || *passes <= 0 {
		return errors.New("--batch and --passes must be positive")
	}
	ring, err := keyRingFromEnv()
	if err != nil {
		return err
	}
	if ring == nil {
		return fmt.Errorf("no keys: set %s (and %s) to the fleet's key ring", keysEnv, currentEnv)
	}
	dbURL := databaseURL()
	if dbURL == "" {
		return errors.New("no database: pass --database-url or set DATABASE_URL")
	}
	c, pool, err := openClient(ctx, dbURL)
	if err != nil {
		return err
	}
	defer closeClient(c, pool)
	rc := pgqueue.New(pool, pgqueue.Config{Logger: slog.New(slog.DiscardHandler), Encryption: ring})
	defer rc.Close()
	fmt.Fprintf(stdout, "re-sealing under key %s (ring: %s)\n", ring.Current(), strings.Join(ring.IDs(), ", "))
	from := *after
	for pass := 1; pass <= *passes; pass++ {
		p, err := rc.RotateEncryption(ctx, pgqueue.RotateOpts{Batch: *batch, After: from, Progress: func(p pgqueue.RotateProgress) {
			fmt.Fprintf(stdout, "pass %d: cursor %d, %d read, %d re-sealed, %d skipped\n", pass, p.Cursor, p.Scanned, p.Rewritten, p.Skipped)
		}})
		if err != nil {
			return fmt.Errorf("pass %d stopped at cursor %d (resume with --after %d): %w", pass, p.Cursor, p.Cursor, err)
		}
		fmt.Fprintf(stdout, "pass %d done: %d read, %d re-sealed, %d skipped\n", pass, p.Scanned, p.Rewritten, p.Skipped)
		if len(p.MissingKeys) > 0 {
			return fmt.Errorf("jobs sealed under keys the ring lacks (%s) were left as they are: add those keys to %s and run again",
				strings.Join(p.MissingKeys, ", "), keysEnv)
		}
		if p.Rewritten == 0 && p.Skipped == 0 {
			fmt.Fprintf(stdout, "every job's args are under key %s\n", ring.Current())
			return nil
		}
		from = 0
	}
	return fmt.Errorf("after %d passes some jobs were still being re-sealed (inserts under an old key?): run again", *passes)
}
