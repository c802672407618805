// Package crashtest kills a host with SIGKILL again and again at random points of its
// work, for tests of the record it leaves behind. The host is a test function of the
// same test binary, run again as a child: it does its work until it is killed, and says
// "serving" on a line of its stdout once it is ready.
package crashtest

import (
	"bufio"
	"context"
	"database/sql"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/release"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/store/postgres"
)

// Config is what Run kills.
type Config struct {
	Child string   // the test function that is the host: TestCrashChild
	Env   []string // added to the host's environment
	Kills int      // how many hosts to start and kill
	// EarlyEvery: the first host and every EarlyEvery-th after it is killed within
	// 300 ms of its start, while it opens the record and starts its worker.
	EarlyEvery int
	// Progress grows as a host works: a host not killed early is killed once it has
	// grown since the host started serving, within Jitter after.
	Progress func() int64
	Jitter   time.Duration
	// Patience is how long a host may take to make progress before the test fails.
	Patience time.Duration
}

// Run starts and kills c.Kills hosts, one after another, each with TMPDIR a short
// directory of its own (see TempDir).
func Run(t testing.TB, c Config) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp := TempDir(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	for i := range c.Kills {
		cmd := exec.Command(self, "-test.run=^"+c.Child+"$")
		cmd.Env = append(append(os.Environ(), c.Env...), "TMPDIR="+tmp)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if i%c.EarlyEvery == 0 {
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		} else {
			before := c.Progress()
			bufio.NewReader(out).ReadString('\n')
			for deadline := time.Now().Add(c.Patience); c.Progress() == before; {
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("host %d made no progress within %v", i+1, c.Patience)
				}
				time.Sleep(2 * time.Millisecond)
			}
			time.Sleep(time.Duration(rng.Int64N(int64(c.Jitter))))
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
}

// TempDir is a temporary directory for the hosts, removed with what they leave there
// (read-only release copies included) when the test ends. Its name is short (t.TempDir's
// is not), so that a worker's socket under it stays within the length a Unix socket's
// path may have.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "h")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { release.RemoveAll(dir) })
	return dir
}

// FileSize is the size of file, 0 if there is none: a host's progress, when it appends
// to the file as it works.
func FileSize(file string) int64 {
	info, err := os.Stat(file)
	if err != nil {
		return 0
	}
	return info.Size()
}

// Counts runs each of queries, a count by its name, on db.
func Counts(t testing.TB, db *sql.DB, queries map[string]string) map[string]int {
	t.Helper()
	counts := make(map[string]int, len(queries))
	for name, query := range queries {
		var n int
		if err := db.QueryRow(query).Scan(&n); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		counts[name] = n
	}
	return counts
}

// Zero reports, as errors of t, each of names whose count is not 0.
func Zero(t testing.TB, counts map[string]int, names ...string) {
	t.Helper()
	for _, name := range names {
		if counts[name] != 0 {
			t.Errorf("%s: %d", name, counts[name])
		}
	}
}

// OpenPostgres is Open for a record in the PostgreSQL database at url: db reads it
// through the same server.
func OpenPostgres(t testing.TB, url string) (*store.Store, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	st, err := postgres.OpenStore(ctx, url, store.Options{})
	if err != nil {
		t.Fatalf("the record does not open after the kills: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Check(ctx); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return st, db
}

// Open opens the record the hosts left in dataDir, and fails t unless it opens and is
// sound (Store.Check); db reads it read-only, for invariants in SQL. Both close when the
// test ends.
func Open(t testing.TB, dataDir string) (*store.Store, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	st, err := store.OpenDir(ctx, dataDir, store.Options{})
	if err != nil {
		t.Fatalf("the record does not open after the kills: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Check(ctx); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dataDir, store.FileName)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return st, db
}
