package scripttests

import (
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m, nil) }
