package pgqueue

import (
	"bytes"
	"encoding/json"
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
