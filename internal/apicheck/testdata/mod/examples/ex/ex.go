// Package ex is an example, copied rather than imported.
package ex

// Example is not API.
func Example() {}
