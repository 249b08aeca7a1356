// Package x is internal.
package x

// Internal is not API.
func Internal() {}
