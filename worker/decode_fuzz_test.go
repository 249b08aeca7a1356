package worker

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/queue"
)

// fuzzArgs has a field of each JSON shape a job's args commonly use.
type fuzzArgs struct {
	N    int             `json:"n"`
	S    string          `json:"s"`
	F    []float64       `json:"f"`
	M    map[string]bool `json:"m"`
	Next *fuzzArgs       `json:"next"`
	Raw  json.RawMessage `json:"raw"`
}

func (fuzzArgs) Kind() string { return "fuzz" }

// FuzzDecodeArgs: stored args either decode into the handler's type or
// fail with ErrDecodeArgs naming the type; what decodes encodes and decodes
// again to the same value, on the same job.
func FuzzDecodeArgs(f *testing.F) {
	for _, s := range []string{`{}`, `null`, `{"n":1,"s":"x","f":[1.5,-0],"m":{"a":true},"next":{"n":2},"raw":[1,{"a":null}]}`,
		`{"n":1e400}`, `{"n":"1"}`, `[`, `{"s":"\ud800"}`, `{"N":3,"n":4}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		job := &queue.Job{ID: 1, Kind: "fuzz", EncodedArgs: data}
		j, err := decode[fuzzArgs](job)
		if err != nil {
			if !errors.Is(err, ErrDecodeArgs) || !strings.Contains(err.Error(), "worker.fuzzArgs") {
				t.Fatalf("decode(%q) = %v, want ErrDecodeArgs naming the type", data, err)
			}
			return
		}
		if j.Job != job {
			t.Fatalf("decode(%q) lost the job", data)
		}
		b, err := json.Marshal(j.Args)
		if err != nil {
			t.Fatalf("decoded %q to %+v, which does not encode: %v", data, j.Args, err)
		}
		j2, err := decode[fuzzArgs](&queue.Job{EncodedArgs: b})
		if err != nil || !reflect.DeepEqual(normal(t, j.Args), normal(t, j2.Args)) {
			t.Fatalf("decoded %q to %+v; encoded %s; decoded again to %+v, %v", data, j.Args, b, j2, err)
		}
	})
}

// normal returns a's encoding with the raw field compacted: a
// json.RawMessage keeps the spacing it was given.
func normal(t *testing.T, a fuzzArgs) string {
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
