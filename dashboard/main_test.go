package dashboard_test

import (
	"testing"

	"github.com/jobfence/jobfence/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
