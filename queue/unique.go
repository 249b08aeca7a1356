package queue

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// UniqueOpts makes an insert refuse a duplicate of a job that is still in
// one of ByState's states, as River's UniqueOpts do: jobfence computes the
// job's unique key from its kind and, as asked, its args (all, or some
// fields), its queue and its period, and a unique index over the jobs in
// those states decides, so concurrent inserts from any number of
// processes make one job. The refused insert returns the existing job's
// ID and state (EnqueueResult.Inserted false). The zero value, &UniqueOpts{},
// allows one unfinished job of the kind.
//
// Unlike EnqueueParams.UniqueKey, which refuses a duplicate in every
// state until the job is pruned (what a cron fire needs: one job per fire,
// ever), a finished job refuses nothing unless ByState names its state.
type UniqueOpts struct {
	// ByArgs makes the args part of the key: jobs with different args are
	// not duplicates. Every field counts, unless the args type tags some
	// with `unique:"true"`: then only those do (typed inserts set ByFields
	// from the tags). Objects are compared with their keys sorted, so the
	// order a field was encoded in does not matter.
	ByArgs bool
	// ByFields names the top-level args fields (by their JSON names) that
	// make the key, instead of every field or the tagged ones; it implies
	// ByArgs. A typed insert checks that each is a field of the args type;
	// an untyped one (EnqueueParams) counts a field its args lack as
	// absent.
	ByFields []string
	// ByPeriod, when not zero, makes the key hold for one period: the
	// insert's ScheduledAt (or, when zero, the inserting host's clock)
	// truncated to a multiple of ByPeriod since the Unix epoch. With an
	// hour, a job of 10:20 and one of 10:50 are duplicates, one of 11:05
	// is not. Hosts whose clocks disagree by d may disagree on the period
	// of inserts made within d of its end.
	ByPeriod time.Duration
	// ByQueue makes the queue part of the key: the same job in two queues
	// is not a duplicate.
	ByQueue bool
	// ByState lists the states in which a job refuses a duplicate. Nil (or
	// empty) means UniqueUnfinished: available, scheduled, running and
	// retryable. A list must hold those four and may add completed,
	// discarded or cancelled: a job moves between the unfinished states
	// without an insert (a claim, a retry, a snooze), and a job that
	// stopped refusing in one of them could not refuse again when it moved
	// back beside a duplicate inserted meanwhile.
	//
	// Limited is always among the states, whatever the list (see States):
	// a job waiting for a limit's slot (pgqueue's Limit) is as unfinished
	// as an available one, and it moves between limited and available
	// without an insert; naming limited changes nothing. Pending is not
	// among them unless named, and naming it changes nothing either: only
	// workflow tasks are pending, and a task cannot be unique (a workflow
	// with a task that has Unique or a UniqueKey is refused).
	ByState []State
	// Debounce, instead of refusing a duplicate whose existing job has not
	// started (available, scheduled, or limited: waiting for a limit's
	// slot), moves that job to the new insert's scheduled time
	// (ScheduledAt, or now when zero): each insert of a burst puts the job
	// off again, and it runs once, at the last one's time.
	// EnqueueResult.Debounced reports the move. A job put off to a later
	// time gives up a limit's slot it held and waits for one again when
	// its time comes, ahead of the jobs inserted after it. A duplicate of
	// a running, retryable or finished job is refused as without Debounce.
	// Its args, priority, deadline and other fields stay as they were.
	Debounce bool
}

// uniqueRequired are the states in which a unique job refuses a duplicate
// by default, and which every UniqueOpts.ByState must hold.
var uniqueRequired = []State{StateAvailable, StateScheduled, StateRunning, StateRetryable}

// UniqueUnfinished returns the states in which a job with UniqueOpts
// refuses a duplicate by default: available, scheduled, running and
// retryable. Every UniqueOpts.ByState must hold them.
func UniqueUnfinished() []State { return slices.Clone(uniqueRequired) }

// StateBitmask returns states as the bitmask PostgreSQL's
// jobfence_state_in_bitmask reads (see stateBit).
func StateBitmask(states []State) int16 {
	var m int16
	for _, s := range states {
		m |= stateBit(s)
	}
	return m
}

// stateBit is a state's bit in a unique job's bitmask. The bits are fixed
// rather than taken from the states' order in States(): the unique index
// holds rows by the bits stored with them, so a bit may never change its
// meaning, and a state added later gets a new bit, in Go and in the SQL
// function alike, in the migration that adds the state (before any row
// can be in it).
func stateBit(s State) int16 {
	switch s {
	case StateAvailable:
		return 1
	case StateScheduled:
		return 2
	case StateRunning:
		return 4
	case StateRetryable:
		return 8
	case StateCompleted:
		return 16
	case StateDiscarded:
		return 32
	case StateCancelled:
		return 64
	case StateLimited:
		return 128
	case StatePending:
		return 256
	}
	return 0
}

// States returns the states in which a job with u refuses a duplicate:
// ByState, or UniqueUnfinished when it is empty, and limited with
// available: a job waiting for a slot of its limit (pgqueue's Limit) is
// as unfinished as one waiting to be claimed.
func (u *UniqueOpts) States() []State {
	states := u.ByState
	if len(states) == 0 {
		states = UniqueUnfinished()
	}
	if slices.Contains(states, StateAvailable) && !slices.Contains(states, StateLimited) {
		states = append(slices.Clone(states), StateLimited)
	}
	return states
}

// validate reports what is wrong with u.
func (u *UniqueOpts) validate() error {
	if u.ByPeriod < 0 {
		return &InvalidParamsError{Field: "Unique.ByPeriod", Reason: "is negative"}
	}
	for _, f := range u.ByFields {
		if f == "" {
			return &InvalidParamsError{Field: "Unique.ByFields", Reason: "names an empty field"}
		}
	}
	for _, s := range u.ByState {
		if _, err := ParseState(string(s)); err != nil {
			return &InvalidParamsError{Field: "Unique.ByState", Reason: fmt.Sprintf("has %v", err)}
		}
	}
	if len(u.ByState) > 0 {
		var lack []string
		for _, s := range uniqueRequired {
			if !slices.Contains(u.ByState, s) {
				lack = append(lack, string(s))
			}
		}
		if len(lack) > 0 {
			return &InvalidParamsError{Field: "Unique.ByState", Reason: "must hold available, scheduled, running and retryable " +
				"(a job moves between them without an insert, and could not refuse a duplicate again once back in one it left); it lacks " +
				strings.Join(lack, ", ")}
		}
	}
	return nil
}

// UniqueHash returns the key of p's computed uniqueness (p.Unique, which
// must be set): a SHA-256 of p's kind and, as p.Unique asks, its args or
// some of their fields, its queue and its period, which now (the host's
// clock) starts when p has no ScheduledAt. Apply WithDefaults to p first
// when its queue counts. Jobs whose keys are equal are duplicates.
func (p EnqueueParams) UniqueHash(now time.Time) ([]byte, error) {
	return p.UniqueHashFor(now, nil)
}

// UniqueHashFor is UniqueHash for a client with the key ring ring (which
// may be nil): a job that ring encrypts (KeyRing.Encrypts) gets an
// HMAC-SHA256 of the same input, keyed by the ring's MAC key (see
// Encryption.MACKey), so the stored key does not let anyone confirm a
// guess of the args, and equal args still make equal keys whichever data
// key seals them.
func (p EnqueueParams) UniqueHashFor(now time.Time, ring *KeyRing) ([]byte, error) {
	u := p.Unique
	if u == nil {
		return nil, fmt.Errorf("jobfence: unique hash of %s: the params have no UniqueOpts", p.Kind)
	}
	// JSON of a struct: each part is quoted and named, so no two different
	// sets of parts encode the same way.
	var key struct {
		Kind   string          `json:"kind"`
		Queue  *string         `json:"queue,omitempty"`
		Period string          `json:"period,omitempty"`
		Args   json.RawMessage `json:"args,omitempty"`
		Fields json.RawMessage `json:"fields,omitempty"`
	}
	key.Kind = p.Kind
	if u.ByQueue {
		key.Queue = &p.Queue
	}
	if u.ByPeriod > 0 {
		at := p.ScheduledAt
		if at.IsZero() {
			at = now
		}
		n := at.UnixNano()
		start := n - n%int64(u.ByPeriod)
		if n%int64(u.ByPeriod) < 0 {
			start -= int64(u.ByPeriod)
		}
		key.Period = time.Unix(0, start).UTC().Format(time.RFC3339Nano) + "/" + u.ByPeriod.String()
	}
	if u.ByArgs || len(u.ByFields) > 0 {
		args := p.Args
		if args == nil {
			args = []byte("{}")
		}
		d := json.NewDecoder(bytes.NewReader(args))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("jobfence: unique hash of %s: decode args: %w", p.Kind, err)
		}
		var err error
		if len(u.ByFields) == 0 {
			key.Args, err = json.Marshal(v) // maps encode with their keys sorted
		} else {
			obj, ok := v.(map[string]any)
			if !ok {
				return nil, &InvalidParamsError{Field: "Unique.ByFields", Reason: "needs args that are a JSON object"}
			}
			fields := map[string]any{}
			for _, f := range u.ByFields {
				if x, ok := obj[f]; ok {
					fields[f] = x
				}
			}
			key.Fields, err = json.Marshal(fields)
		}
		if err != nil {
			return nil, fmt.Errorf("jobfence: unique hash of %s: %w", p.Kind, err)
		}
	}
	b, err := json.Marshal(key)
	if err != nil {
		return nil, fmt.Errorf("jobfence: unique hash of %s: %w", p.Kind, err)
	}
	if ring.Encrypts(p) {
		return ring.macHash(b), nil
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// uniqueFields returns the JSON names of the fields of args's struct type
// (or of the struct it points to) that carry the tag unique:"true", and
// every field's JSON name; both nil for a type that is not a struct.
func uniqueFields(args Args) (tagged, all []string) {
	t := reflect.TypeOf(args)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil, nil
	}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous && f.Type.Kind() == reflect.Struct {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		all = append(all, name)
		if f.Tag.Get("unique") == "true" {
			tagged = append(tagged, name)
		}
	}
	return tagged, all
}

// typedUnique returns u completed for args's type: ByFields from the
// type's unique:"true" tags when ByArgs asks for the args and ByFields is
// empty, and an error naming a ByFields entry that is no field of the type.
func typedUnique(args Args, u *UniqueOpts) (*UniqueOpts, error) {
	if u == nil {
		return nil, nil
	}
	tagged, all := uniqueFields(args)
	if all == nil {
		return u, nil
	}
	if len(u.ByFields) == 0 {
		if !u.ByArgs || len(tagged) == 0 {
			return u, nil
		}
		c := *u
		c.ByFields = tagged
		return &c, nil
	}
	for _, f := range u.ByFields {
		if !slices.Contains(all, f) {
			return nil, &InvalidParamsError{Field: "Unique.ByFields", Reason: fmt.Sprintf("names %q, which is no field of the args of kind %q (its fields: %s)",
				f, args.Kind(), strings.Join(all, ", "))}
		}
	}
	return u, nil
}
