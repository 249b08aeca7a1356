// Package nested is another module.
package nested

// Nested is not this module's API.
func Nested() {}
