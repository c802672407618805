package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kilnrt/kiln/internal/release"
	"github.com/kilnrt/kiln/internal/store"
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
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = m.Activate(ctx, release.Dir(data, id), 0)
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrStaleEpoch):
			t.Errorf("an activation failed with %v; want ErrStaleEpoch", err)
		}
	}
	lines, err := os.ReadFile(starts)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(lines), "\n"); won != 1 || n != 1 {
		t.Errorf("%d activations asked at once: %d won, %d hooks workers started; want 1 and 1", len(errs), won, n)
	}
}
