package policy

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/release"
)

// TestActivationsRunOneAtATime: activations asked at once run one after another, and
// those whose expected epoch the first one moved start no hooks worker at all.
func TestActivationsRunOneAtATime(t *testing.T) {
	ctx := context.Background()
	data := dataDir(t)
	st := openStore(t, data)
	starts := filepath.Join(t.TempDir(), "starts")
	id := storeRelease(t, data, hooks("counted", "import os\nwith open("+strconv.Quote(starts)+", 'a') as f:\n"+
		"    f.write(str(os.getpid()) + '\\n')\n", "return Wake(1)", "return Allow()"))
	m := newManager(t, st, data)
	const asked = 4
	won := activateAtOnce(t, ctx, m, release.Dir(data, id), asked)
	lines, err := os.ReadFile(starts)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(lines), "\n"); won != 1 || n != 1 {
		t.Errorf("%d activations asked at once: %d won, %d hooks workers started; want 1 and 1", asked, won, n)
	}
}
