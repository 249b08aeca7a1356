package stampede

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// An entry is what the Guard stores at a value key: a header that XFetch
// needs, then the codec's bytes.
//
//	byte 0      entryVersion
//	bytes 1-8   expiry, Unix milliseconds, big endian
//	bytes 9-16  delta (computation time), microseconds, big endian
//	bytes 17-   payload
type entry struct {
	expiry  time.Time
	delta   time.Duration
	payload []byte
}

const (
	entryVersion    = 1
	entryHeaderSize = 17
)

var errBadEntry = errors.New("stampede: stored entry has an unknown format")

func (e entry) encode() []byte {
	b := make([]byte, entryHeaderSize, entryHeaderSize+len(e.payload))
	b[0] = entryVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(e.expiry.UnixMilli()))
	binary.BigEndian.PutUint64(b[9:17], uint64(e.delta.Microseconds()))
	return append(b, e.payload...)
}

func decodeEntry(b []byte) (entry, error) {
	if len(b) < entryHeaderSize || b[0] != entryVersion {
		return entry{}, errBadEntry
	}
	return entry{
		expiry:  time.UnixMilli(int64(binary.BigEndian.Uint64(b[1:9]))),
		delta:   time.Duration(int64(binary.BigEndian.Uint64(b[9:17]))) * time.Microsecond,
		payload: b[entryHeaderSize:],
	}, nil
}

// refreshEarly is the XFetch test: recompute when
// now - delta*beta*ln(r) >= expiry, with r uniform in (0, 1].
// It is never true for beta <= 0.
func (e entry) refreshEarly(now time.Time, beta, r float64) bool {
	if beta <= 0 || r <= 0 {
		return false
	}
	gap := -float64(e.delta) * beta * math.Log(r)
	if gap >= float64(math.MaxInt64) {
		return true
	}
	return !now.Add(time.Duration(gap)).Before(e.expiry)
}
