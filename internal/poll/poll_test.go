package poll_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/poll"
)

// TestWaitLooksUntilTheConditionHolds: a condition that comes true after some looks
// ends the wait with true; one that never does ends it with false once the timeout has
// passed, not before.
func TestWaitLooksUntilTheConditionHolds(t *testing.T) {
	var looks atomic.Int32
	if !poll.Wait(10*time.Second, func() bool { return looks.Add(1) == 3 }) || looks.Load() != 3 {
		t.Errorf("a condition true at the third look: %d looks", looks.Load())
	}
	start := time.Now()
	if poll.Wait(50*time.Millisecond, func() bool { return false }) {
		t.Error("a condition never true held")
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("gave up after %v; want the whole timeout", waited)
	}
}

// fatalTB records a failure and ends the goroutine that called Fatalf, as testing.T
// does.
type fatalTB struct {
	testing.TB
	failed string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// readFIFO runs poll.ReadFIFO on a goroutine of its own, for a failure that ends it.
func readFIFO(path string, timeout time.Duration) (got, failed string) {
	tb := &fatalTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = poll.ReadFIFO(tb, path, timeout)
	}()
	<-done
	return got, tb.failed
}

// TestReadFIFOEndsAtItsTimeout: what a writer writes and closes is read; a FIFO no
// writer opens, and one whose writer never closes it, each fail at the timeout rather
// than hang.
func TestReadFIFOEndsAtItsTimeout(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.WriteString("running\n")
			w.Close()
		}
	}()
	if got, failed := readFIFO(fifo, time.Minute); got != "running\n" || failed != "" {
		t.Errorf("a writer's line: %q, %q", got, failed)
	}

	start := time.Now()
	if _, failed := readFIFO(fifo, 100*time.Millisecond); !strings.Contains(failed, "no writer opened") {
		t.Errorf("no writer: %q", failed)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("gave up after %v; want the whole timeout", waited)
	}

	opened := make(chan *os.File, 1)
	go func() {
		w, _ := os.OpenFile(fifo, os.O_WRONLY, 0)
		w.WriteString("half")
		opened <- w
	}()
	if _, failed := readFIFO(fifo, 200*time.Millisecond); !strings.Contains(failed, `not closed by its writer within 200ms; read "half"`) {
		t.Errorf("a writer that stays: %q", failed)
	}
	(<-opened).Close()
}
