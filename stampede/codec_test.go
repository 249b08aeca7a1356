package stampede

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jobfence/jobfence/internal/redistest"
)

type fuzzValue struct {
	S string
	N int64
	B []byte
}

// FuzzCodec stores arbitrary keys and values through each codec in Redis
// and reads them back through a second Guard, as another instance would.
func FuzzCodec(f *testing.F) {
	f.Add("report", "hello", int64(42), []byte{0, 1, 2})
	f.Add("k", "", int64(0), []byte(nil))
	f.Add("späť/ключ:{tag}*?[]", "naïve ☃", int64(-1), []byte("\xff\xfe"))
	f.Add("\x00\xff binary key\r\n", "\xff invalid utf-8", int64(-9223372036854775808), bytes.Repeat([]byte{7}, 4096))
	f.Add("lock:x", `{"json":"inside"}`, int64(9223372036854775807), []byte{})

	client, prefix := redistest.Client(f)
	codecs := map[string]Codec{"json": JSONCodec{}, "gob": GobCodec{}}
	guards := map[string][2]*Guard[fuzzValue]{}
	for name, c := range codecs {
		guards[name] = [2]*Guard[fuzzValue]{
			newGuard[fuzzValue](f, client, prefix+name+":", Options{Codec: c, Beta: -1}),
			newGuard[fuzzValue](f, client, prefix+name+":", Options{Codec: c, Beta: -1}),
		}
	}
	f.Fuzz(func(t *testing.T, key, s string, n int64, b []byte) {
		if key == "" {
			return // rejected by Get; see TestGetRejectsBadArguments
		}
		want := fuzzValue{S: s, N: n, B: b}
		for name, g := range guards {
			if name == "json" && !utf8.ValidString(s) {
				want.S = string([]rune(s)) // JSON stores invalid UTF-8 as U+FFFD
			}
			if _, err := g[0].Get(context.Background(), key, time.Minute, func(context.Context) (fuzzValue, error) { return want, nil }); err != nil {
				t.Fatalf("%s: Get(%q) store: %v", name, key, err)
			}
			got, err := g[1].Get(context.Background(), key, time.Minute, func(context.Context) (fuzzValue, error) {
				return fuzzValue{}, errors.New("computed again: the stored value was not found")
			})
			if err != nil {
				t.Fatalf("%s: Get(%q) read back: %v", name, key, err)
			}
			if got.S != want.S || got.N != want.N || !bytes.Equal(got.B, want.B) {
				t.Fatalf("%s: key %q: got %+v, want %+v", name, key, got, want)
			}
			client.Del(context.Background(), g[0].valueKey(key))
		}
	})
}
