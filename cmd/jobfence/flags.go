package main

import "flag"

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
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(operands, rest...), nil
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
}
