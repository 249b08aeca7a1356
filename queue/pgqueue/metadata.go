package pgqueue

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/jobfence/jobfence/queue"
)

// decodeMetadata decodes a job's metadata column. With telemetry on,
// every claimed job carries a traceparent, so the common case, a flat
// object of strings without escapes as PostgreSQL prints jsonb, is parsed
// directly: encoding/json's reflection costs more than the rest of the row.
// Anything else goes through encoding/json.
func decodeMetadata(b []byte) (map[string]string, error) {
	if bytes.IndexByte(b, '\\') < 0 {
		if m, ok := flatStrings(b); ok {
			return m, nil
		}
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// flatStrings parses {"k": "v", ...} whose strings have no escapes; ok is
// false for anything else.
func flatStrings(b []byte) (m map[string]string, ok bool) {
	i := 0
	skip := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
			i++
		}
	}
	expect := func(c byte) bool {
		skip()
		if i < len(b) && b[i] == c {
			i++
			return true
		}
		return false
	}
	str := func() (string, bool) {
		if !expect('"') {
			return "", false
		}
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return "", false
		}
		s := string(b[i : i+j])
		i += j + 1
		return s, true
	}
	if !expect('{') {
		return nil, false
	}
	m = map[string]string{}
	if expect('}') {
		skip()
		return m, i == len(b)
	}
	for {
		k, ok := str()
		if !ok || !expect(':') {
			return nil, false
		}
		v, ok := str()
		if !ok {
			return nil, false
		}
		m[k] = v
		if expect(',') {
			continue
		}
		if !expect('}') {
			return nil, false
		}
		skip()
		return m, i == len(b)
	}
}

// traceparentKey is the metadata key of a W3C traceparent, the one
// metadata telemetry stores with every job it traces.
const traceparentKey = "traceparent"

// packedTraceparentLen is a traceparent in its own column (migration
// 00009): version, trace id, parent id and flags, 26 bytes instead of the
// 80 or so its key and 55 characters take inside the metadata's jsonb.
// Every claim and completion writes a new version of the row, and
// PostgreSQL prints jsonb as text for every claimed job, so the column
// costs less CPU per traced job (docs/benchmarks/code.md).
const packedTraceparentLen = 26

// packTraceparent returns h's 26 bytes when h has exactly the shape W3C
// Trace Context prints (two, 32, 16 and two lowercase hex digits between
// dashes), so that unpackTraceparent gives h back byte for byte; for
// anything else it returns nil and h stays in the jsonb as it is.
func packTraceparent(h string) []byte {
	if len(h) != 55 || h[2] != '-' || h[35] != '-' || h[52] != '-' {
		return nil
	}
	var digits [2 * packedTraceparentLen]byte
	n := copy(digits[:], h[0:2])
	n += copy(digits[n:], h[3:35])
	n += copy(digits[n:], h[36:52])
	copy(digits[n:], h[53:55])
	b := make([]byte, packedTraceparentLen)
	if _, err := hex.Decode(b, digits[:]); err != nil {
		return nil
	}
	// hex.Decode takes upper case too, which would come back lower.
	var printed [55]byte
	formatTraceparent(&printed, b)
	if string(printed[:]) != h {
		return nil
	}
	return b
}

// unpackTraceparent prints what packTraceparent packed; ok is false for
// anything but 26 bytes.
func unpackTraceparent(b []byte) (h string, ok bool) {
	if len(b) != packedTraceparentLen {
		return "", false
	}
	var printed [55]byte
	formatTraceparent(&printed, b)
	return string(printed[:]), true
}

// formatTraceparent prints 26 packed bytes as W3C Trace Context does.
func formatTraceparent(dst *[55]byte, b []byte) {
	hex.Encode(dst[0:2], b[0:1])
	dst[2] = '-'
	hex.Encode(dst[3:35], b[1:17])
	dst[35] = '-'
	hex.Encode(dst[36:52], b[17:25])
	dst[52] = '-'
	hex.Encode(dst[53:55], b[25:26])
}

// emptyMetadata is what a job without metadata stores.
var emptyMetadata = []byte("{}")

// encodeMetadata returns what a job stores of own merged with what a hook
// added: the jsonb of the metadata column and, when the traceparent packs,
// the trace_context column's bytes (nil, NULL, otherwise), the traceparent
// then left out of the jsonb.
func encodeMetadata(own, add map[string]string) (md, traceContext []byte, err error) {
	m := queue.MergeMetadata(own, add)
	if tc := packTraceparent(m[traceparentKey]); tc != nil {
		traceContext = tc
		if len(m) == 1 {
			return emptyMetadata, traceContext, nil
		}
		// own and add are the caller's: the key is left out of a copy.
		m = maps.Clone(m)
		delete(m, traceparentKey)
	}
	if len(m) == 0 {
		return emptyMetadata, nil, nil
	}
	if md, err = json.Marshal(m); err != nil {
		return nil, nil, fmt.Errorf("encode metadata: %w", err)
	}
	return md, traceContext, nil
}

// decodeJobMetadata is a claimed job's metadata: the jsonb column's
// pairs and the packed traceparent. Most jobs carry neither: '{}' and NULL
// are left as a nil map, no allocation. A trace_context that does not
// unpack (not written by jobfence) is left out: it is a link for a trace,
// and failing the claim over it would stall every job claimed with it.
func decodeJobMetadata(md, traceContext []byte) (map[string]string, error) {
	var m map[string]string
	if len(md) > 2 {
		var err error
		if m, err = decodeMetadata(md); err != nil {
			return nil, err
		}
	}
	if h, ok := unpackTraceparent(traceContext); ok {
		if m == nil {
			m = make(map[string]string, 1)
		}
		m[traceparentKey] = h
	}
	return m, nil
}
