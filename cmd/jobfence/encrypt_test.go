package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestEncryptCommands: `jobs show` (text and --json) and `jobs list
// --json` show encrypted args as "encrypted (key k1)" without the keys
// and in clear with them in the environment; `encrypt rotate` re-seals
// them under the current key in batches, printing its progress and no key;
// bad key variables are clear errors that show no key.
func TestEncryptCommands(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	k1 := bytes.Repeat([]byte{'P'}, queue.KeySize)
	k2 := bytes.Repeat([]byte{'Q'}, queue.KeySize)
	r1, err := queue.NewKeyRing(queue.Encryption{Keys: map[string][]byte{"k1": k1}, Current: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	c := pgqueue.New(db.Pool, pgqueue.Config{Encryption: r1})
	var id int64
	for i := range 5 {
		res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "pay", Args: fmt.Appendf(nil, `{"card":"4111-%d"}`, i), Encrypt: true})
		if err != nil {
			t.Fatal(err)
		}
		id = res.ID
	}
	b64 := base64.StdEncoding.EncodeToString
	cli := func(env map[string]string, args ...string) (string, int) {
		t.Helper()
		for _, k := range []string{keysEnv, currentEnv, macKeyEnv} {
			t.Setenv(k, env[k])
		}
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{args[0], "--database-url", db.URL}, args[1:]...), &out, &errb)
		text := out.String() + errb.String()
		for _, k := range [][]byte{k1, k2} {
			if strings.Contains(text, string(k[:8])) || strings.Contains(text, b64(k)[:12]) {
				t.Fatalf("jobfence %v printed a key: %q", args, text)
			}
		}
		return text, code
	}
	none := map[string]string{}
	with1 := map[string]string{keysEnv: "k1=" + b64(k1)}
	rotating := map[string]string{keysEnv: "k1=" + b64(k1) + ",k2=" + b64(k2), macKeyEnv: "k1"}
	sid := fmt.Sprint(id)
	steps := []struct {
		env      map[string]string
		args     []string
		wantCode int
		want     string
		notWant  string
	}{
		{none, []string{"jobs", "show", sid}, 0, "args encrypted (key k1)", "4111"},
		{none, []string{"jobs", "show", "--json", sid}, 0, `"args": "encrypted (key k1)"`, "4111"},
		{none, []string{"jobs", "list", "--json"}, 0, `"args": "encrypted (key k1)"`, "4111"},
		{with1, []string{"jobs", "show", sid}, 0, `args {"card":"4111-4"}`, ""},
		{with1, []string{"jobs", "show", "--json", sid}, 0, `"card": "4111-4"`, ""},
		{none, []string{"encrypt", "rotate"}, 1, "no keys: set JOBFENCE_ENCRYPTION_KEYS", ""},
		{map[string]string{keysEnv: "k1"}, []string{"encrypt", "rotate"}, 1, "JOBFENCE_ENCRYPTION_KEYS: entry 1 is not ID=BASE64", ""},
		{map[string]string{keysEnv: "k1=" + b64(k1[:16])}, []string{"encrypt", "rotate"}, 1, `key "k1" is 16 bytes; AES-256 needs exactly 32`, ""},
		{map[string]string{keysEnv: "k1=!!" + b64(k1)}, []string{"encrypt", "rotate"}, 1, `key "k1" is not standard base64`, ""},
		{rotating, []string{"encrypt", "frob"}, 1, `unknown encrypt action "frob": want rotate`, ""},
		{rotating, []string{"encrypt", "--batch", "2", "rotate"}, 0, "pass 1 done: 5 read, 5 re-sealed, 0 skipped", ""},
		{rotating, []string{"encrypt", "rotate"}, 0, "every job's args are under key k2", ""},
		{none, []string{"jobs", "show", sid}, 0, "args encrypted (key k2)", "4111"},
		{rotating, []string{"jobs", "show", sid}, 0, `args {"card":"4111-4"}`, ""},
	}
	for _, s := range steps {
		out, code := cli(s.env, s.args...)
		if code != s.wantCode || !strings.Contains(out, s.want) || s.notWant != "" && strings.Contains(out, s.notWant) {
			t.Fatalf("jobfence %v: exit %d, %q; want exit %d containing %q", s.args, code, out, s.wantCode, s.want)
		}
	}
	if out, _ := cli(rotating, "encrypt", "--batch", "2", "rotate"); !strings.Contains(out, "cursor") && !strings.Contains(out, "pass 1") {
		t.Fatalf("rotate printed no progress: %q", out)
	}
}
