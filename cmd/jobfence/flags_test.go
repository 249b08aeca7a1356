package main

import (
	"flag"
	"io"
	"slices"
	"testing"
)

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		args     []string
		operands []string
		url      string
	}{
		{[]string{"show", "7"}, []string{"show", "7"}, ""},
		{[]string{"--database-url", "U", "show", "7"}, []string{"show", "7"}, "U"},
		{[]string{"show", "--database-url", "U", "7"}, []string{"show", "7"}, "U"},
		{[]string{"show", "7", "--database-url=U"}, []string{"show", "7"}, "U"},
		{[]string{"delete", "--", "--odd-name"}, []string{"delete", "--odd-name"}, ""},
		{[]string{"--database-url", "--", "list", "--database-url=U"}, []string{"list"}, "U"},
		{nil, nil, ""},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		url := fs.String("database-url", "", "")
		got, err := parseInterspersed(fs, tt.args)
		if err != nil || !slices.Equal(got, tt.operands) || *url != tt.url {
			t.Errorf("parseInterspersed(%q) = %q, %v with url %q; want %q with url %q", tt.args, got, err, *url, tt.operands, tt.url)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := parseInterspersed(fs, []string{"list", "--nope"}); err == nil {
		t.Error("an unknown flag after the action parsed without error")
	}
}
