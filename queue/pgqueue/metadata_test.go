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

// TestPackTraceparent: what packs unpacks to the same text; anything else
// does not pack and is kept in the jsonb as it is.
func TestPackTraceparent(t *testing.T) {
	for _, h := range []string{
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"00-00000000000000000000000000000000-0000000000000000-00",
		"cc-ffffffffffffffffffffffffffffffff-ffffffffffffffff-ff",
	} {
		b := packTraceparent(h)
		if len(b) != packedTraceparentLen {
			t.Errorf("%s packed to %d bytes, want %d", h, len(b), packedTraceparentLen)
			continue
		}
		if got, ok := unpackTraceparent(b); !ok || got != h {
			t.Errorf("%s unpacked to %q, %v", h, got, ok)
		}
	}
	for _, h := range []string{
		"",
		"00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",
		"00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01",
		"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
	} {
		if b := packTraceparent(h); b != nil {
			t.Errorf("%q packed to %x, want it kept as text", h, b)
		}
	}
	if _, ok := unpackTraceparent(make([]byte, 25)); ok {
		t.Error("25 bytes unpacked")
	}
}
