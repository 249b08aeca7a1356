package idempotency_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jobfence/jobfence/idempotency"
)

// FuzzFingerprint: a fingerprint is 64 hex digits; requests with the same
// JSON have the same one, however the JSON was spaced or its object keys
// ordered; distinct text requests have distinct ones; what cannot be
// encoded is an error, not a panic.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{`{"amount":4200,"currency":"EUR"}`, `{"b":1, "a":[true,null,"x"]}`, `[`, `"\u00e9"`, `1e999`, ``, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fp := func(v any) string {
			t.Helper()
			s, err := idempotency.Fingerprint(v)
			if err != nil {
				t.Fatalf("Fingerprint(%#v): %v", v, err)
			}
			if b, err := hex.DecodeString(s); err != nil || len(b) != 32 {
				t.Fatalf("Fingerprint(%#v) = %q, not 64 hex digits", v, s)
			}
			return s
		}
		if utf8.Valid(data) {
			if a, b := fp(string(data)), fp(string(data)+" "); a == b {
				t.Fatalf("the requests %q and %q have the same fingerprint", data, string(data)+" ")
			}
		}
		if !json.Valid(data) {
			if _, err := idempotency.Fingerprint(json.RawMessage(data)); err == nil || !strings.HasPrefix(err.Error(), "idempotency: fingerprint: ") {
				t.Fatalf("Fingerprint of the invalid JSON %q = %v, want an error", data, err)
			}
			return
		}
		var spaced bytes.Buffer
		if err := json.Indent(&spaced, data, " ", "\t"); err != nil {
			t.Fatal(err)
		}
		if a, b := fp(json.RawMessage(data)), fp(json.RawMessage(spaced.Bytes())); a != b {
			t.Fatalf("%q and its indented form have different fingerprints", data)
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return // valid JSON that Go cannot hold, such as 1e999
		}
		encoded, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var again any
		if err := json.Unmarshal(encoded, &again); err != nil {
			t.Fatal(err)
		}
		if a, b := fp(v), fp(again); a != b {
			t.Fatalf("%q decoded, encoded as %s and decoded again changed its fingerprint", data, encoded)
		}
	})
}
