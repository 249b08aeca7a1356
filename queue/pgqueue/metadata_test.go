package pgqueue

import (
	"encoding/json"
	"maps"
	"testing"
)

// TestDecodeMetadata: the direct parse agrees with encoding/json on what
// PostgreSQL prints, and hands everything else to it.
func TestDecodeMetadata(t *testing.T) {
	for _, in := range []string{
		`{}`,
		`{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`,
		`{"a": "1", "b": ""}`,
		`{"quote\"d": "x\\y", "u": "\u00e9"}`,
		` { "a" : "b" } `,
	} {
		got, err := decodeMetadata([]byte(in))
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		var want map[string]string
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", in, got, want)
		}
	}
	for _, in := range []string{`{"a": 1}`, `{"a": "b"`, `{"a": "b"} x`, `[]`} {
		if m, err := decodeMetadata([]byte(in)); err == nil {
			t.Errorf("%s: decoded as %v, want an error", in, m)
		}
	}
}
