package main

import (
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	tests := []struct {
		name, in, wantLast string
		wantCode           int
		wantShown          []string
		wantHidden         []string
	}{
		{
			name: "passing suite",
			in: `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:3: chatter\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"skip","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}
{"Action":"pass","Package":"p"}`,
			wantLast: "1 passed, 0 failed, 1 skipped", wantCode: 0,
			wantShown: []string{"ok  \tp\t0.1s"}, wantHidden: []string{"chatter"},
		},
		{
			name: "a failing test shows its output",
			in: `{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:3: boom\n"}
{"Action":"fail","Package":"p","Test":"TestA"}
{"Action":"pass","Package":"p","Test":"TestB"}
{"Action":"fail","Package":"p"}`,
			wantLast: "1 passed, 1 failed, 0 skipped", wantCode: 1,
			wantShown: []string{"a_test.go:3: boom", "FAILED: p TestA"},
		},
		{
			name:     "a package that does not build",
			in:       "# p\np/a.go:1: syntax error\n" + `{"Action":"fail","Package":"p"}`,
			wantLast: "0 passed, 1 failed, 0 skipped", wantCode: 1,
			wantShown: []string{"p/a.go:1: syntax error"},
		},
		{name: "no test at all", in: "", wantLast: "0 passed, 0 failed, 0 skipped", wantCode: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			code := run(strings.NewReader(tt.in), &out)
			lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
			if code != tt.wantCode || lines[len(lines)-1] != tt.wantLast {
				t.Fatalf("exit %d, output:\n%s\nwant exit %d ending %q", code, out.String(), tt.wantCode, tt.wantLast)
			}
			for _, s := range tt.wantShown {
				if !strings.Contains(out.String(), s) {
					t.Errorf("output lacks %q:\n%s", s, out.String())
				}
			}
			for _, s := range tt.wantHidden {
				if strings.Contains(out.String(), s) {
					t.Errorf("output shows %q:\n%s", s, out.String())
				}
			}
		})
	}
}
