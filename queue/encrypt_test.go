package queue_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// testKey is a 32-byte key made of b; its bytes are printable, so a test
// can look for them in a message.
func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, queue.KeySize) }

func ring(t *testing.T, e queue.Encryption) *queue.KeyRing {
	t.Helper()
	r, err := queue.NewKeyRing(e)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestKeyRingRefusesBadConfig: each bad Encryption gets an error that
// names what is wrong, wraps ErrBadEncryptionConfig, and shows none of
// the keys' bytes.
func TestKeyRingRefusesBadConfig(t *testing.T) {
	good := testKey('A')
	tests := []struct {
		name string
		e    queue.Encryption
		want string
	}{
		{"no keys", queue.Encryption{Current: "k1"}, "Keys is empty: give at least one 32-byte key"},
		{"short key", queue.Encryption{Keys: map[string][]byte{"k1": testKey('B')[:16]}, Current: "k1"}, `key "k1" is 16 bytes; AES-256 needs exactly 32`},
		{"empty id", queue.Encryption{Keys: map[string][]byte{"": good}, Current: ""}, `key ID "" is empty`},
		{"bad id", queue.Encryption{Keys: map[string][]byte{"k:1": good}, Current: "k:1"}, `key ID "k:1" has ':': use A-Z a-z 0-9 _ . -`},
		{"long id", queue.Encryption{Keys: map[string][]byte{strings.Repeat("k", 65): good}}, "is longer than 64 characters"},
		{"no current", queue.Encryption{Keys: map[string][]byte{"k1": good}}, "Current is empty: name the key that seals new args"},
		{"unknown current", queue.Encryption{Keys: map[string][]byte{"k1": good, "k2": testKey('C')}, Current: "k3"}, `Current "k3" is not one of Keys (k1, k2)`},
		{"empty kind", queue.Encryption{Keys: map[string][]byte{"k1": good}, Current: "k1", Kinds: []string{""}}, "Kinds holds an empty kind"},
		{"unknown mac key", queue.Encryption{Keys: map[string][]byte{"k1": good}, Current: "k1", MACKey: "m"}, `MACKey "m" is not one of Keys (k1)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := queue.NewKeyRing(tt.e)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, queue.ErrBadEncryptionConfig) {
				t.Fatalf("err = %v, want ErrBadEncryptionConfig containing %q", err, tt.want)
			}
			for _, k := range tt.e.Keys {
				if len(k) >= 8 && strings.Contains(err.Error(), string(k[:8])) {
					t.Errorf("the error %q shows key bytes", err)
				}
			}
		})
	}
}

// TestSealOpen: sealed args are a JSON string that holds neither the
// plaintext nor the key, name their key, and open to the plaintext; the
// same args seal differently each time (a random nonce).
func TestSealOpen(t *testing.T) {
	r := ring(t, queue.Encryption{Keys: map[string][]byte{"k1": testKey('A'), "k2": testKey('B')}, Current: "k2"})
	plain := []byte(`{"card":"4111111111111111"}`)
	s1, err := r.Seal("charge", plain)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := r.Seal("charge", plain)
	if bytes.Equal(s1, s2) {
		t.Error("two seals of the same args are equal: the nonce is not random")
	}
	var str string
	if err := json.Unmarshal(s1, &str); err != nil || !strings.HasPrefix(str, queue.SealedPrefix+"k2:") {
		t.Fatalf("sealed %s (%v): want a JSON string beginning %q", s1, err, queue.SealedPrefix+"k2:")
	}
	if bytes.Contains(s1, []byte("4111")) || bytes.Contains(s1, testKey('B')[:8]) {
		t.Fatalf("sealed args %s show the plaintext or the key", s1)
	}
	if key, ok := queue.SealedKey(s1); !ok || key != "k2" {
		t.Fatalf("SealedKey = %q, %v; want k2", key, ok)
	}
	if _, ok := queue.SealedKey(plain); ok {
		t.Fatal("plain args read as sealed")
	}
	got, err := r.Open("charge", s1)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open = %s, %v; want %s", got, err, plain)
	}
	// jsonb gives the string back as stored: a space before it changes nothing.
	if got, err := r.Open("charge", append([]byte(" "), s1...)); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open with a leading space = %s, %v", got, err)
	}
	if got, err := r.Open("charge", plain); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open of plain args = %s, %v; want them as they are", got, err)
	}
	if got := string(r.Show("charge", s1)); got != string(plain) {
		t.Errorf("Show with the key = %s", got)
	}
	var none *queue.KeyRing
	if got := string(none.Show("charge", s1)); got != "encrypted (key k2)" {
		t.Errorf("Show without a ring = %q, want %q", got, "encrypted (key k2)")
	}
}

// TestOpenRefusesWrongKey: a missing ring, a ring without the key, a
// different key under the same ID, another kind and altered bytes are
// each a *KeyError (ErrEncryptionKey) that names the key and shows no key
// bytes nor plaintext.
func TestOpenRefusesWrongKey(t *testing.T) {
	r := ring(t, queue.Encryption{Keys: map[string][]byte{"k1": testKey('A')}, Current: "k1"})
	sealed, err := r.Seal("charge", []byte(`{"secret":"s3cr3t"}`))
	if err != nil {
		t.Fatal(err)
	}
	other := ring(t, queue.Encryption{Keys: map[string][]byte{"k2": testKey('B')}, Current: "k2"})
	impostor := ring(t, queue.Encryption{Keys: map[string][]byte{"k1": testKey('C')}, Current: "k1"})
	altered := bytes.Clone(sealed)
	altered[len(altered)-5] ^= 1
	var none *queue.KeyRing
	tests := []struct {
		name string
		r    *queue.KeyRing
		kind string
		args []byte
		want string
	}{
		{"no ring", none, "charge", sealed, `args of kind "charge" encrypted with key "k1": this process has no encryption keys configured (Encryption)`},
		{"key absent", other, "charge", sealed, `encrypted with key "k1": the key ring lacks that key (it holds k2)`},
		{"other key same id", impostor, "charge", sealed, "the ciphertext does not authenticate"},
		{"other kind", r, "refund", sealed, `args of kind "refund" encrypted with key "k1": the ciphertext does not authenticate`},
		{"altered", r, "charge", altered, "does not authenticate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.r.Open(tt.kind, tt.args)
			var ke *queue.KeyError
			if !errors.As(err, &ke) || !errors.Is(err, queue.ErrEncryptionKey) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want a KeyError containing %q", err, tt.want)
			}
			for _, b := range []byte{'A', 'B', 'C'} {
				if strings.Contains(err.Error(), string(testKey(b)[:8])) {
					t.Errorf("the error %q shows key bytes", err)
				}
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the error %q shows the plaintext", err)
			}
		})
	}
}

// TestKeyRingPrintsNoKey: a ring formatted any way shows its IDs, never a
// key's bytes.
func TestKeyRingPrintsNoKey(t *testing.T) {
	r := ring(t, queue.Encryption{Keys: map[string][]byte{"k1": testKey('A'), "k2": testKey('B')}, Current: "k2"})
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		s := fmt.Sprintf(f, r)
		if strings.Contains(s, "AAAAAAAA") || strings.Contains(s, "BBBBBBBB") || !strings.Contains(s, "k1,k2") {
			t.Errorf("%s of the ring: %q", f, s)
		}
	}
	e := queue.Encryption{Keys: map[string][]byte{"k1": testKey('A')}, Current: "k1"}
	if _, err := queue.NewKeyRing(e); err != nil {
		t.Fatal(err)
	}
}

// TestReseal: args under an old key come back under the current one and
// open to the same plaintext; args under the current key, and plain args,
// come back unchanged.
func TestReseal(t *testing.T) {
	old := ring(t, queue.Encryption{Keys: map[string][]byte{"k1": testKey('A')}, Current: "k1"})
	r := ring(t, queue.Encryption{Keys: map[string][]byte{"k1": testKey('A'), "k2": testKey('B')}, Current: "k2"})
	plain := []byte(`{"n":1}`)
	s1, _ := old.Seal("k", plain)
	s2, changed, err := r.Reseal("k", s1)
	if err != nil || !changed {
		t.Fatalf("Reseal = %v, %v", changed, err)
	}
	if key, _ := queue.SealedKey(s2); key != "k2" {
		t.Fatalf("resealed under %q, want k2", key)
	}
	if got, err := r.Open("k", s2); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open = %s, %v", got, err)
	}
	if got, changed, err := r.Reseal("k", s2); err != nil || changed || !bytes.Equal(got, s2) {
		t.Fatalf("Reseal of current = %v, %v", changed, err)
	}
	if got, changed, err := r.Reseal("k", plain); err != nil || changed || !bytes.Equal(got, plain) {
		t.Fatalf("Reseal of plain = %v, %v", changed, err)
	}
}

// TestUniqueHashForEncryptedJobs: a job the ring encrypts gets a keyed
// hash, not the plain SHA-256; equal args hash equal under rings with
// different current keys and the same MAC key, and differently under
// another MAC key; a job the ring does not encrypt keeps the plain hash.
func TestUniqueHashForEncryptedJobs(t *testing.T) {
	keys := map[string][]byte{"k1": testKey('A'), "k2": testKey('B')}
	r1 := ring(t, queue.Encryption{Keys: keys, Current: "k1", MACKey: "k1"})
	r2 := ring(t, queue.Encryption{Keys: keys, Current: "k2", MACKey: "k1"})
	r3 := ring(t, queue.Encryption{Keys: keys, Current: "k2"}) // MAC key k2
	now := time.Now()
	p := queue.EnqueueParams{Kind: "k", Args: []byte(`{"a":1,"b":2}`), Unique: &queue.UniqueOpts{ByArgs: true}, Encrypt: true}
	reordered := p
	reordered.Args = []byte(`{"b":2,"a":1}`)
	h := func(p queue.EnqueueParams, r *queue.KeyRing) []byte {
		t.Helper()
		b, err := p.UniqueHashFor(now, r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	plain := hash(t, p, now)
	if bytes.Equal(h(p, r1), plain) {
		t.Error("an encrypted job's hash is the plain SHA-256")
	}
	if !bytes.Equal(h(p, r1), h(reordered, r2)) {
		t.Error("equal args under another current key, same MAC key: hashes differ")
	}
	if bytes.Equal(h(p, r1), h(p, r3)) {
		t.Error("another MAC key made the same hash")
	}
	notAsked := p
	notAsked.Encrypt = false
	if !bytes.Equal(h(notAsked, r1), plain) {
		t.Error("a job the ring does not encrypt lost its plain hash")
	}
	all := ring(t, queue.Encryption{Keys: keys, Current: "k1", MACKey: "k1", All: true})
	if !bytes.Equal(h(notAsked, all), h(p, r1)) {
		t.Error("with All, a job that did not ask has no keyed hash")
	}
	byKind := ring(t, queue.Encryption{Keys: keys, Current: "k1", MACKey: "k1", Kinds: []string{"k"}})
	if !byKind.Encrypts(notAsked) || !bytes.Equal(h(notAsked, byKind), h(p, r1)) {
		t.Error("a kind of Kinds is not encrypted, or has no keyed hash")
	}
	if other := (queue.EnqueueParams{Kind: "other"}); byKind.Encrypts(other) {
		t.Error("a kind not in Kinds is encrypted")
	}
}

type secretArgs struct {
	Card string `json:"card"`
}

func (secretArgs) Kind() string                 { return "secret" }
func (secretArgs) EncryptArgs() bool            { return true }
func (secretArgs) InsertOpts() queue.InsertOpts { return queue.InsertOpts{Queue: "vault"} }

func (clearArgs) Kind() string      { return "clear" }
func (clearArgs) EncryptArgs() bool { return false }

type clearArgs struct{ N string }

// TestParamsAskEncryption: a typed insert asks for encryption when its
// args type says so, and only then.
func TestParamsAskEncryption(t *testing.T) {
	p, err := queue.Params(secretArgs{Card: "x"}, nil)
	if err != nil || !p.Encrypt || p.Queue != "vault" {
		t.Fatalf("secret: %+v, %v", p, err)
	}
	p, err = queue.Params(clearArgs{N: "x"}, nil)
	if err != nil || p.Encrypt {
		t.Fatalf("plain: %+v, %v", p, err)
	}
}

// BenchmarkSealOpen measures one seal and one open of 200 bytes of args.
func BenchmarkSealOpen(b *testing.B) {
	r, err := queue.NewKeyRing(queue.Encryption{Keys: map[string][]byte{"k1": testKey('A')}, Current: "k1"})
	if err != nil {
		b.Fatal(err)
	}
	plain := bytes.Repeat([]byte("x"), 200)
	for range b.N {
		s, err := r.Seal("k", plain)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Open("k", s); err != nil {
			b.Fatal(err)
		}
	}
}
