// Package s is a subpackage of the fixture.
package s

// Fetch is the function the change test edits.
func Fetch(id int64) (string, error) { return "", nil }
