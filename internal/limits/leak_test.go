package limits_test

import (
	"os"
	"testing"

	"github.com/kilnrt/kiln/internal/leakcheck"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }
