package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

// FuzzParseInterspersed: flags given anywhere among the operands mean what
// they mean given first: the operands come back in order, each flag's
// value is kept, whatever the values and operands hold.
func FuzzParseInterspersed(f *testing.F) {
	f.Add("show\x007", "postgres://u@h/db", true, uint8(1), uint8(0))
	f.Add("delete\x00--odd", "U", false, uint8(0), uint8(2))
	f.Add("list", "-", true, uint8(9), uint8(9))
	f.Add("", "--", true, uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, operandList, url string, force bool, urlAt, forceAt uint8) {
		var operands []string
		if operandList != "" {
			operands = strings.Split(operandList, "\x00")
		}
		// Operands that look like flags must follow "--"; keep the rest.
		operands = slices.DeleteFunc(operands, func(o string) bool { return len(o) > 1 && o[0] == '-' })
		args := slices.Clone(operands)
		if force {
			args = slices.Insert(args, int(forceAt)%(len(args)+1), "--force")
		}
		args = slices.Insert(args, int(urlAt)%(len(args)+1), "--database-url", url)
		fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		gotURL := fs.String("database-url", "", "")
		gotForce := fs.Bool("force", false, "")
		got, err := parseInterspersed(fs, args)
		if err != nil || *gotURL != url || *gotForce != force || !slices.Equal(got, operands) {
			t.Fatalf("parseInterspersed(%q) = %q, %v with url %q, force %v; want %q with url %q, force %v",
				args, got, err, *gotURL, *gotForce, operands, url, force)
		}
	})
}
