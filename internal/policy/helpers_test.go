package policy

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/store"
)

// gate holds a hook where it stands, and tells the test it is there: the hook's
// gate(what) writes what to the FIFO at, then waits for a line on the FIFO go. The test
// keeps both open for reading and writing, so neither side's open ever blocks.
type gate struct {
	at, goOn *os.File
	lines    *bufio.Reader
	py       string // the Python that defines gate(what)
}

func newGate(t *testing.T) *gate {
	t.Helper()
	dir := t.TempDir()
	at, goOn := filepath.Join(dir, "at"), filepath.Join(dir, "go")
	g := &gate{py: "AT, GO = " + strconv.Quote(at) + ", " + strconv.Quote(goOn) + `
def gate(what):
    with open(AT, "w") as f:
        f.write(what + "\n")
    with open(GO) as f:
        f.readline()
`}
	for _, path := range []string{at, goOn} {
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if g.at, err = os.OpenFile(at, os.O_RDWR, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.at.Close() })
	if g.goOn, err = os.OpenFile(goOn, os.O_RDWR, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.goOn.Close() })
	g.lines = bufio.NewReader(g.at)
	return g
}

// reached waits for a hook to stand at the gate, and says what it said there.
func (g *gate) reached(t *testing.T) string {
	t.Helper()
	g.at.SetReadDeadline(time.Now().Add(30 * time.Second)) // a hang's bound, not a timing claim
	line, err := g.lines.ReadString('\n')
	if err != nil {
		t.Fatalf("no hook reached the gate: %v", err)
	}
	return strings.TrimSuffix(line, "\n")
}

// open lets the hook at the gate go on.
func (g *gate) open(t *testing.T) {
	t.Helper()
	if _, err := g.goOn.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
}

// hooks is a release's files: module mod with attention and delivery as given (each
// the body of a function of request and context).
func hooks(mod, prelude, attention, delivery string) map[string]string {
	return map[string]string{
		"manifest.json": `{"version":1,"hooks":{"attention.plan":"` + mod + `:attention","delivery.review":"` + mod + `:delivery"}}`,
		mod + ".py": "from kiln_hooks import Allow, Defer, Hold, Ignore, Wake\n" + prelude + "\n" +
			"def attention(request, context):\n    " + attention + "\n\n" +
			"def delivery(request, context):\n    " + delivery + "\n",
	}
}

func newManager(t *testing.T, st *store.Store, data string) *Manager {
	t.Helper()
	m, err := NewManager(context.Background(), st, data, Config{Python: pythonPath(t), SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// activateAtOnce makes n activations of dir at once, each expecting epoch 0, and
// returns how many won; every loser must fail with store.ErrStaleEpoch.
func activateAtOnce(t *testing.T, ctx context.Context, m *Manager, dir string, n int) int {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = m.Activate(ctx, dir, 0) })
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
	return won
}
