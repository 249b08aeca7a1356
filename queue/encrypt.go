package queue

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// KeySize is the size of every encryption key: AES-256 takes 32 bytes.
const KeySize = 32

// MaxKeyIDLen bounds a key ID's length.
const MaxKeyIDLen = 64

// SealedPrefix begins every encrypted args value: the stored args are the
// JSON string SealedPrefix + key ID + ":" + base64(nonce || ciphertext),
// a valid jsonb value that no typed args (a JSON object) can be. The "v1"
// in it is the envelope's version: AES-256-GCM with a 12-byte random
// nonce, the job's kind and the key ID as additional data.
const SealedPrefix = "jobfence-encrypted:v1:"

// ErrEncryptionKey reports args that cannot be encrypted or decrypted
// with the key ring at hand: the ring lacks the key they name, there is
// no ring, or the ciphertext does not authenticate under the key (a
// wrong key, or bytes altered in the database). Match it with
// errors.Is; a *KeyError tells which key.
var ErrEncryptionKey = errors.New("jobfence: encryption key")

// ErrBadEncryptionConfig reports an Encryption that NewKeyRing refuses.
var ErrBadEncryptionConfig = errors.New("jobfence: invalid encryption config")

// KeyError is an ErrEncryptionKey for one job's args: Key names the key
// the args were sealed with ("" for args that were to be encrypted by a
// client with no key ring), Kind the job's kind, Reason what went wrong.
// It never holds a key's bytes.
type KeyError struct {
	Kind, Key, Reason string
}

func (e *KeyError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("jobfence: args of kind %q: %s", e.Kind, e.Reason)
	}
	return fmt.Sprintf("jobfence: args of kind %q encrypted with key %q: %s", e.Kind, e.Key, e.Reason)
}

// Unwrap returns ErrEncryptionKey.
func (e *KeyError) Unwrap() error { return ErrEncryptionKey }

// Encryption configures the encryption of jobs' args at rest: the keys
// that a KeyRing holds, which of them seals new args, which keys the
// unique-by-args hash, and which jobs are encrypted.
type Encryption struct {
	// Keys maps each key ID to its 32-byte AES-256 key. An ID is 1 to
	// MaxKeyIDLen characters of A-Z a-z 0-9 _ . -; it is stored with each
	// sealed args, so it is not secret (k1, k2, 2026-12). Keep every key
	// that sealed args still stored (a job retried from the finished ones
	// included) until `jobfence encrypt rotate` has re-sealed them.
	Keys map[string][]byte
	// Current is the ID of the key that seals new args; required, and one
	// of Keys.
	Current string
	// MACKey is the ID of the key from which the keyed hash of a unique
	// job's args is derived (HMAC-SHA256), so that the unique key stored
	// beside the ciphertext does not let anyone confirm a guess of the
	// args. Empty means Current. Changing it (or Current while it is
	// empty) changes the unique keys of new inserts: a job inserted
	// before and its duplicate inserted after are not seen as duplicates
	// until the first one finishes. Pin it to one key that you keep, and
	// rotate it only when no unique job is unfinished, or accept that
	// window.
	MACKey string
	// All encrypts every job's args. Without it only the jobs whose args
	// type asks (EncryptedArgs), whose EnqueueParams.Encrypt is set, or
	// whose kind is in Kinds are encrypted, as Oban Pro's `encrypted:` and
	// Sidekiq Enterprise's `encrypt: true` are per worker.
	All bool
	// Kinds lists job kinds whose every job is encrypted, however it is
	// inserted (a schedule stored in the database, an untyped insert), as
	// if it asked (EnqueueParams.Encrypt).
	Kinds []string
}

// EncryptedArgs is implemented by an args type whose jobs are stored
// encrypted: a typed insert (Params) sets EnqueueParams.Encrypt from
// EncryptArgs. A client without a key ring refuses such an insert rather
// than store the args in clear.
type EncryptedArgs interface {
	EncryptArgs() bool
}

// KeyRing seals and opens jobs' args with AES-256-GCM under the keys of
// an Encryption. Build it with NewKeyRing; it is safe for concurrent use,
// and its String and formatting never show a key.
type KeyRing struct {
	aeads   map[string]cipher.AEAD
	current string
	mac     []byte
	macID   string
	all     bool
	kinds   map[string]bool
}

// macLabel separates the unique hash's key from the AES key it is derived
// from: the same bytes are never used as both.
const macLabel = "jobfence unique args mac v1"

// NewKeyRing validates e and returns its KeyRing. Each error names the
// field and key ID at fault and wraps ErrBadEncryptionConfig; none shows
// a key's bytes.
func NewKeyRing(e Encryption) (*KeyRing, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadEncryptionConfig}, a...)...)
	}
	if len(e.Keys) == 0 {
		return nil, bad("Keys is empty: give at least one 32-byte key")
	}
	r := &KeyRing{aeads: make(map[string]cipher.AEAD, len(e.Keys)), current: e.Current, all: e.All, kinds: map[string]bool{}}
	for _, k := range e.Kinds {
		if k == "" {
			return nil, bad("Kinds holds an empty kind")
		}
		r.kinds[k] = true
	}
	ids := make([]string, 0, len(e.Keys))
	for id := range e.Keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := validKeyID(id); err != nil {
			return nil, bad("key ID %q %s", id, err)
		}
		k := e.Keys[id]
		if len(k) != KeySize {
			return nil, bad("key %q is %d bytes; AES-256 needs exactly %d", id, len(k), KeySize)
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, bad("key %q: %v", id, err)
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			return nil, bad("key %q: %v", id, err)
		}
		r.aeads[id] = gcm
	}
	if e.Current == "" {
		return nil, bad("Current is empty: name the key that seals new args")
	}
	if _, ok := e.Keys[e.Current]; !ok {
		return nil, bad("Current %q is not one of Keys (%s)", e.Current, strings.Join(ids, ", "))
	}
	r.macID = e.MACKey
	if r.macID == "" {
		r.macID = e.Current
	}
	mk, ok := e.Keys[r.macID]
	if !ok {
		return nil, bad("MACKey %q is not one of Keys (%s)", r.macID, strings.Join(ids, ", "))
	}
	m := hmac.New(sha256.New, mk)
	m.Write([]byte(macLabel))
	r.mac = m.Sum(nil)
	return r, nil
}

// validKeyID reports what is wrong with a key ID.
func validKeyID(id string) error {
	if id == "" {
		return errors.New("is empty")
	}
	if len(id) > MaxKeyIDLen {
		return fmt.Errorf("is longer than %d characters", MaxKeyIDLen)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("has %q: use A-Z a-z 0-9 _ . -", c)
		}
	}
	return nil
}

// String names the ring's keys by ID, never by value.
func (r *KeyRing) String() string {
	if r == nil {
		return "KeyRing(none)"
	}
	return fmt.Sprintf("KeyRing(current %s, keys %s)", r.current, strings.Join(r.IDs(), ","))
}

// GoString is String, so that %#v shows no key either.
func (r *KeyRing) GoString() string { return r.String() }

// Current returns the ID of the key that seals new args.
func (r *KeyRing) Current() string { return r.current }

// IDs returns the IDs of the ring's keys, sorted.
func (r *KeyRing) IDs() []string {
	ids := make([]string, 0, len(r.aeads))
	for id := range r.aeads {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Encrypts reports whether the ring encrypts p: when p asks
// (EnqueueParams.Encrypt), its kind is among Encryption.Kinds, or the ring
// encrypts all jobs. A nil ring encrypts nothing.
func (r *KeyRing) Encrypts(p EnqueueParams) bool {
	return r != nil && (r.all || p.Encrypt || r.kinds[p.Kind])
}

// Seal returns args (JSON) of a job of kind sealed under the current key,
// as the JSON string described at SealedPrefix.
func (r *KeyRing) Seal(kind string, args []byte) ([]byte, error) {
	return r.sealWith(r.current, kind, args)
}

func (r *KeyRing) sealWith(id, kind string, args []byte) ([]byte, error) {
	gcm := r.aeads[id]
	nonce := make([]byte, gcm.NonceSize(), gcm.NonceSize()+len(args)+gcm.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("jobfence: seal args of kind %q: %w", kind, err)
	}
	ct := gcm.Seal(nonce, nonce, args, additionalData(kind, id))
	out := make([]byte, 0, len(SealedPrefix)+len(id)+base64.StdEncoding.EncodedLen(len(ct))+3)
	out = append(out, '"')
	out = append(out, SealedPrefix...)
	out = append(out, id...)
	out = append(out, ':')
	out = base64.StdEncoding.AppendEncode(out, ct)
	return append(out, '"'), nil
}

// additionalData binds a ciphertext to its job's kind and key ID: sealed
// args copied onto a job of another kind do not open.
func additionalData(kind, id string) []byte {
	return []byte("jobfence/v1\x00" + kind + "\x00" + id)
}

// SealedKey reports whether stored args are sealed (see SealedPrefix) and
// names the key that sealed them. It reads the envelope's prefix only.
func SealedKey(args []byte) (key string, sealed bool) {
	args = bytes.TrimSpace(args)
	if len(args) < len(SealedPrefix)+2 || args[0] != '"' || !bytes.HasPrefix(args[1:], []byte(SealedPrefix)) {
		return "", false
	}
	rest := args[1+len(SealedPrefix):]
	i := bytes.IndexByte(rest, ':')
	if i <= 0 {
		return "", false
	}
	return string(rest[:i]), true
}

// DescribeSealed is how a viewer without the key shows sealed args:
// `encrypted (key k2)`.
func DescribeSealed(key string) string { return fmt.Sprintf("encrypted (key %s)", key) }

// Open returns the plaintext of args sealed for a job of kind (args that
// are not sealed come back as they are). A key the ring lacks, or a
// ciphertext that does not authenticate, is a *KeyError.
func (r *KeyRing) Open(kind string, args []byte) ([]byte, error) {
	id, sealed := SealedKey(args)
	if !sealed {
		return args, nil
	}
	if r == nil {
		return nil, &KeyError{Kind: kind, Key: id, Reason: "this process has no encryption keys configured (Encryption)"}
	}
	gcm, ok := r.aeads[id]
	if !ok {
		return nil, &KeyError{Kind: kind, Key: id, Reason: fmt.Sprintf("the key ring lacks that key (it holds %s)", strings.Join(r.IDs(), ", "))}
	}
	var s string
	if err := json.Unmarshal(bytes.TrimSpace(args), &s); err != nil {
		return nil, &KeyError{Kind: kind, Key: id, Reason: "the envelope is not a JSON string"}
	}
	ct, err := base64.StdEncoding.DecodeString(s[len(SealedPrefix)+len(id)+1:])
	if err != nil || len(ct) < gcm.NonceSize()+gcm.Overhead() {
		return nil, &KeyError{Kind: kind, Key: id, Reason: "the envelope's ciphertext is malformed"}
	}
	plain, err := gcm.Open(nil, ct[:gcm.NonceSize()], ct[gcm.NonceSize():], additionalData(kind, id))
	if err != nil {
		return nil, &KeyError{Kind: kind, Key: id, Reason: "the ciphertext does not authenticate under the ring's key of that ID (a different key under the same ID, or altered bytes)"}
	}
	return plain, nil
}

// Reseal returns args sealed under the current key, and whether they
// changed: args sealed under another key are opened and sealed again;
// args already under the current key, or not sealed, come back as they
// are.
func (r *KeyRing) Reseal(kind string, args []byte) ([]byte, bool, error) {
	id, sealed := SealedKey(args)
	if !sealed || id == r.current {
		return args, false, nil
	}
	plain, err := r.Open(kind, args)
	if err != nil {
		return nil, false, err
	}
	out, err := r.Seal(kind, plain)
	return out, err == nil, err
}

// Show returns how args should be shown to a viewer holding r (which may
// be nil): the plaintext when r opens them, DescribeSealed when it cannot,
// the args themselves when they are not sealed.
func (r *KeyRing) Show(kind string, args []byte) []byte {
	id, sealed := SealedKey(args)
	if !sealed {
		return args
	}
	if r != nil {
		if plain, err := r.Open(kind, args); err == nil {
			return plain
		}
	}
	return []byte(DescribeSealed(id))
}

// macHash is the unique hash of a job that the ring encrypts: HMAC-SHA256
// of the hash's input under the ring's MAC key.
func (r *KeyRing) macHash(b []byte) []byte {
	m := hmac.New(sha256.New, r.mac)
	m.Write(b)
	return m.Sum(nil)
}
