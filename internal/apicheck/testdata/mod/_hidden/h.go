// Package hidden is ignored by the go tool.
package hidden

// Hidden is not API.
func Hidden() {}
