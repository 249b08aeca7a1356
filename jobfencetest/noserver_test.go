package jobfencetest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/jobfencetest"
)

// helperEnv makes TestNewDBWithoutAServer's re-executed test binary run
// the NewDB call under test instead of skipping it.
const helperEnv = "JOBFENCETEST_HELPER_NO_SERVER"

// TestNewDBWithoutAServer is, in a re-executed test binary, a test that
// calls NewDB with DATABASE_URL unset; run normally, it checks what that
// test reports: a failure saying what to do, or, when Main could not
// start a server and was told to skip, a skip saying why.
func TestNewDBWithoutAServer(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Setenv("DATABASE_URL", "")
		jobfencetest.NewDB(t)
		t.Log("NewDB returned")
		return
	}
	for _, tc := range []struct {
		name, reason string
		wants        []string
	}{
		{"fails without Main", "", []string{"--- FAIL", "DATABASE_URL is unset; call jobfencetest.Main(m) from TestMain, or set DATABASE_URL"}},
		{"skips when Main could not start a server", "jobfencetest: no PostgreSQL server: initdb not found",
			[]string{"--- SKIP", "jobfencetest: no PostgreSQL server: initdb not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestNewDBWithoutAServer$", "-test.v")
			cmd.Env = append(os.Environ(), helperEnv+"=1", "JOBFENCETEST_NO_SERVER="+tc.reason)
			out, _ := cmd.CombinedOutput()
			for _, w := range tc.wants {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(string(out), "NewDB returned") {
				t.Errorf("NewDB returned without a server:\n%s", out)
			}
		})
	}
}
