package session

import (
	"os"
	"testing"

	"github.com/kilnrt/kiln/internal/leakcheck"
)

// TestMain checks the tests in a temporary directory of their own, so that what a
// helper process left, whatever its name, fails the run.
func TestMain(m *testing.M) { os.Exit(leakcheck.RunIsolated(m)) }
