package main

import (
	"errors"
	"flag"
	"strings"
)

// parseInterspersed parses fs's flags wherever they stand among args and
// returns the other arguments (the action and its operands) in order, so
// that `jobfence jobs show 7 --database-url U` and `jobfence jobs
// --database-url U show 7` mean the same. Everything after "--" is an
// operand.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return operands, nil
		}
		if endsWithTerminator(fs, args[:len(args)-len(rest)]) {
			return append(operands, rest...), nil
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
}

// endsWithTerminator reports whether the flags fs.Parse consumed, parsed,
// end with the "--" that ends the flags. A "--" that is a flag's value
// (--database-url --) is not one: it is found by walking the flags as
// Parse did, a flag without "=" that is not boolean taking the next
// argument as its value.
func endsWithTerminator(fs *flag.FlagSet, parsed []string) bool {
	for i := 0; i < len(parsed); i++ {
		if parsed[i] == "--" {
			return true
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(parsed[i], "-"), "=")
		isBool := false
		if f := fs.Lookup(name); f != nil {
			b, ok := f.Value.(interface{ IsBoolFlag() bool })
			isBool = ok && b.IsBoolFlag()
		}
		if !hasValue && !isBool {
			i++
		}
	}
	return false
}

// parseAction is parseInterspersed for a command that takes an action: it
// returns the action and its operands, or, when there is no action, prints
// the usage and returns an error saying which actions there are (want).
func parseAction(fs *flag.FlagSet, args []string, want string) (string, []string, error) {
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return "", nil, err
	}
	if len(rest) == 0 {
		fs.Usage()
		return "", nil, errors.New("want an action: " + want)
	}
	return rest[0], rest[1:], nil
}
