package dashboard

// WithCountCap returns o with the count cap set to n, so that a test
// shows with a few jobs what the pages show with a million.
func WithCountCap(o Options, n int) Options {
	o.countCap = n
	return o
}
