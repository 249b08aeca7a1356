package idempotency

// WithAfterComplete returns a copy of s whose DoTx calls f right after it
// completed the key, before the caller can commit: a test freezes the
// process there.
func WithAfterComplete(s *Store, f func()) *Store {
	c := *s
	c.afterComplete = f
	return &c
}
