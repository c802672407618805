package serve

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/admission"
	"github.com/kilnrt/kiln/internal/limits"
	"github.com/kilnrt/kiln/internal/poll"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// fakeRuntime runs cells that end when their context does or when release is closed,
// recording each start in the store as a workbench does. It stands in for a workbench
// where what is tested is the session's own logic, not the worker's.
type fakeRuntime struct {
	st      *store.Store
	session int64
	entered chan struct{} // when not nil, told of each cell before its start
	gate    chan struct{} // when not nil, a cell's start waits for it
	release chan struct{}
	closed  chan struct{}
	once    sync.Once
	// inputEntered, when not nil, is told of each input before it is recorded;
	// inputGate, when not nil, lets it be recorded once closed. Without a gate inputs
	// are refused.
	inputEntered, inputGate chan struct{}
	// recorded, when not nil, is told of each cell once its end is recorded; hold, when
	// not nil, keeps Execute from returning until it is closed.
	recorded, hold chan struct{}
}

func (f *fakeRuntime) Execute(ctx context.Context, code string, started func(cell, generation string), output func(wire.Output), outputDone func(), _ func(store.Execution, bool)) error {
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.gate != nil {
		<-f.gate
	}
	e, err := f.st.StartExecution(context.WithoutCancel(ctx), f.session, "g-1", code) // as a workbench: recorded, then interrupted
	if err != nil {
		return err
	}
	started(e.CellID, "g-1")
	output(wire.Output{Stream: wire.StreamStdout, Text: code})
	status := "ok"
	select {
	case <-ctx.Done():
		status = "interrupted"
	case <-f.release:
	}
	outputDone()
	err = f.st.EndExecution(context.WithoutCancel(ctx), e, store.ExecutionEnd{Status: status, Output: []byte("[]")})
	if f.recorded != nil {
		f.recorded <- struct{}{}
	}
	if f.hold != nil {
		<-f.hold
	}
	return err
}

func (f *fakeRuntime) Input(ctx context.Context, text string) (int64, error) {
	if f.inputGate == nil {
		return 0, errors.New("no inputs here")
	}
	if f.inputEntered != nil {
		f.inputEntered <- struct{}{}
	}
	<-f.inputGate
	ev, err := f.st.AppendEvent(ctx, f.session, store.SourceOperator, map[string]string{"text": text})
	return ev.ID, err
}
func (f *fakeRuntime) Generation() string { return "g-1" }
func (f *fakeRuntime) Dir() string        { return "/" }
func (f *fakeRuntime) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// startFake starts a daemon whose sessions run fake runtimes; opened tells each.
func startFake(t *testing.T, idle time.Duration) (*Daemon, chan *fakeRuntime) {
	return startFakeWith(t, Options{IdleTimeout: idle})
}

// startFakeWith starts a daemon of opts whose sessions are fakeRuntimes, told on the
// channel as they open. The host's memory is not what these tests test: unless opts
// says otherwise, there is plenty.
func startFakeWith(t *testing.T, opts Options) (*Daemon, chan *fakeRuntime) {
	opened := make(chan *fakeRuntime, 8)
	opts.Dir = t.TempDir()
	if opts.MemAvailable == nil {
		opts.MemAvailable = func() (int64, error) { return 1 << 40, nil }
	}
	opts.Open = func(ctx context.Context, cfg Config, st *store.Store) (Runtime, error) {
		sess, err := st.SessionByName(ctx, cfg.ID)
		if err != nil {
			return nil, err
		}
		f := &fakeRuntime{st: st, session: sess.ID, release: make(chan struct{}), closed: make(chan struct{})}
		opened <- f
		return f, nil
	}
	d, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, opened
}

func TestIdleSessionIsStoppedAndSaysWhy(t *testing.T) {
	d, opened := startFake(t, time.Hour)
	s, err := d.Create(context.Background(), Config{ID: "idle", Limits: limits.Session{IdleTimeoutMS: 50}})
	if err != nil {
		t.Fatal(err)
	}
	f := <-opened
	<-f.closed // the runtime closes when the idle timeout stops the session
	in := s.Info()
	if in.State != StateStopped || !strings.Contains(in.StopReason, "idle for 50ms") || in.StoppedAt == nil {
		t.Fatalf("after the idle timeout: %+v", in)
	}
	if _, err := s.Execute(context.Background(), "1", ""); !errors.Is(err, ErrStopped) {
		t.Fatalf("a cell after the stop: %v", err)
	}
}

func TestARunningCellKeepsTheSessionFromIdling(t *testing.T) {
	d, opened := startFake(t, time.Hour)
	s, err := d.Create(context.Background(), Config{ID: "busy", Limits: limits.Session{IdleTimeoutMS: 20}})
	if err != nil {
		t.Fatal(err)
	}
	f := <-opened
	x, err := s.Execute(context.Background(), "long", "")
	if err != nil {
		t.Fatal(err)
	}
	// The idle timer fires while the cell runs; the session stays open.
	chunks, _, _, err := x.Output(context.Background(), 0)
	if err != nil || len(chunks) != 1 {
		t.Fatalf("live output: %v %v", chunks, err)
	}
	time.AfterFunc(100*time.Millisecond, func() { close(f.release) }) // past the 20 ms idle timeout: a lower bound only
	<-x.Done()
	<-f.closed // once it ended, the timeout stops the session: not before
	rec, err := s.Record(context.Background(), x.Cell())
	if err != nil {
		t.Fatal(err)
	}
	in := s.Info()
	if rec.Status != "ok" || in.StoppedAt == nil || in.StoppedAt.Before(*rec.EndedAt) {
		t.Fatalf("the cell %+v; the session %+v", rec, in)
	}
}

func TestBusyKeysAndStop(t *testing.T) {
	d, opened := startFake(t, -1)
	s, err := d.Create(context.Background(), Config{ID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	f := <-opened
	x, err := s.Execute(context.Background(), "a", "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Execute(context.Background(), "b", ""); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second cell: %v", err)
	}
	if again, err := s.Execute(context.Background(), "a", "k"); err != nil || again != x {
		t.Fatalf("the key again: %v %v", again, err)
	}
	if _, err := s.Execute(context.Background(), "other", "k"); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("the key with other code: %v", err)
	}
	if _, err := s.Execute(context.Background(), "a", strings.Repeat("k", MaxIdempotencyKeyBytes+1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a key past the limit: %v", err)
	}
	if _, err := d.Create(context.Background(), Config{ID: "s"}); !errors.Is(err, ErrExists) {
		t.Fatalf("creating it again: %v", err)
	}
	if err := s.Stop("by the test"); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Record(context.Background(), x.Cell())
	if err != nil || rec.Status != "interrupted" {
		t.Fatalf("the cell running at the stop: %+v %v", rec, err)
	}
	<-f.closed
	gone, err := d.Prune(0)
	if err != nil || len(gone) != 1 || gone[0] != "s" {
		t.Fatalf("prune: %v %v", gone, err)
	}
	if _, err := d.Session("s"); !errors.Is(err, ErrNoSession) {
		t.Fatalf("after prune: %v", err)
	}
}

// A cell sent once the record holds the end of the cell before it is not refused busy,
// though the daemon has not yet freed the session: whoever read that end, as a client
// following the session's events does, may send the next cell at once.
func TestACellAfterARecordedEndWaitsForTheSession(t *testing.T) {
	d, opened := startFake(t, -1)
	s, err := d.Create(t.Context(), Config{ID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	f := <-opened
	f.recorded, f.hold = make(chan struct{}), make(chan struct{})
	free := sync.OnceFunc(func() { close(f.hold) })
	t.Cleanup(free) // before the daemon closes, on a failure too
	if _, err := s.Execute(t.Context(), "a", ""); err != nil {
		t.Fatal(err)
	}
	f.release <- struct{}{}
	<-f.recorded // the end of "a" is in the record; the session is not yet free
	// The next cell waits for the session: here until its context ends, since the
	// session is held. The bound only ends the wait; busy would come at once.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err = s.Execute(ctx, "b", "")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a cell after the recorded end of the one before: %v, want it to wait", err)
	}
	free()
	x, err := s.Execute(t.Context(), "b", "")
	if err != nil {
		t.Fatalf("a cell once the session is free: %v", err)
	}
	f.release <- struct{}{}
	<-f.recorded
	if rec, err := s.Wait(t.Context(), x, time.Minute); err != nil || rec.Status != "ok" {
		t.Fatalf("the cell b: %+v %v", rec, err)
	}
}

func TestOpenSessionsAtTheLimit(t *testing.T) {
	d, opened := startFake(t, -1)
	go func() {
		for range opened {
		}
	}()
	defer close(opened)
	ctx := context.Background()
	var last *Session
	for i := range MaxOpenSessions {
		s, err := d.Create(ctx, Config{ID: "s" + strconv.Itoa(i)})
		if err != nil {
			t.Fatalf("session %d of %d: %v", i+1, MaxOpenSessions, err)
		}
		last = s
	}
	if _, err := d.Create(ctx, Config{ID: "one-more"}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("one past the limit: %v", err)
	}
	if err := last.Stop("room"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Create(ctx, Config{ID: "one-more"}); err != nil {
		t.Fatalf("once one is stopped: %v", err)
	}
}

func TestSessionMCPServersAtTheLimit(t *testing.T) {
	d, _ := startFake(t, time.Hour)
	servers := func(n int) []MCPServer {
		var s []MCPServer
		for i := range n {
			s = append(s, MCPServer{Name: "m" + strconv.Itoa(i), URL: "http://127.0.0.1:1/mcp"})
		}
		return s
	}
	if _, err := d.Create(context.Background(), Config{ID: "at", MCP: servers(MaxMCPServers)}); err != nil {
		t.Fatalf("%d servers: %v", MaxMCPServers, err)
	}
	for _, bad := range [][]MCPServer{
		servers(MaxMCPServers + 1),
		{{Name: "class", URL: "http://x"}},
		{{Name: "a", URL: "http://x"}, {Name: "a", URL: "http://y"}},
		{{Name: "a"}},
		{{Name: "a", URL: "http://x", Command: []string{"x"}}},
		{{Name: "a", URL: "ftp://x"}},
		{{Name: "a", Command: []string{""}}},
		{{Name: "a", Command: []string{"x", "a\x00b"}}},
	} {
		if _, err := d.Create(context.Background(), Config{ID: "past", MCP: bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%d servers %.60v: %v; want ErrInvalid", len(bad), bad, err)
		}
	}
}

// TestAnAbandonedStartIsInterrupted: a caller that leaves before its cell's start is
// recorded never learns the cell's id, so the cell, once it starts, is interrupted.
func TestAnAbandonedStartIsInterrupted(t *testing.T) {
	d, opened := startFake(t, -1)
	s, err := d.Create(context.Background(), Config{ID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	f := <-opened
	f.gate = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Execute(ctx, "abandoned", ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("Execute: %v", err)
	}
	close(f.gate)
	var after int64
	for { // the session's journal, up to the cell's end; a cell left running fails by the test's timeout
		entries, err := d.Events(context.Background(), s.StoreID(), after, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			after = e.Seq
			if e.Kind != store.KindExecutionEnd {
				continue
			}
			rec, err := s.Record(context.Background(), "c-1")
			if err != nil || rec.Status != "interrupted" {
				t.Fatalf("the abandoned cell: %+v %v; want it interrupted", rec, err)
			}
			return
		}
	}
}

// waitCtx is a context that tells, when asked for its Done channel, that its holder
// waits on it.
type waitCtx struct {
	context.Context
	waiting chan struct{}
	once    sync.Once
}

func (c *waitCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// TestAKeyGivenTwiceAtOnceIsOneExecution gives an idempotency key again while its cell
// starts: the second request waits for the start, and is answered the same execution,
// not busy.
func TestAKeyGivenTwiceAtOnceIsOneExecution(t *testing.T) {
	d, opened := startFake(t, -1)
	s, err := d.Create(context.Background(), Config{ID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	f := <-opened
	f.entered, f.gate = make(chan struct{}), make(chan struct{})
	letStart := sync.OnceFunc(func() { close(f.gate) })
	t.Cleanup(letStart) // before the daemon's close, which waits for the cell
	type answer struct {
		x   *Execution
		err error
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() {
		x, err := s.Execute(context.Background(), "a", "k")
		first <- answer{x, err}
	}()
	<-f.entered // the first is the session's running cell, not yet started
	ctx := &waitCtx{Context: context.Background(), waiting: make(chan struct{})}
	go func() {
		x, err := s.Execute(ctx, "a", "k")
		second <- answer{x, err}
	}()
	select {
	case <-ctx.waiting:
	case a := <-second:
		t.Fatalf("the key again, while its cell starts: %v, %v; want it to wait for the start", a.x, a.err)
	}
	letStart()
	a, b := <-first, <-second
	if a.err != nil || b.err != nil || a.x != b.x {
		t.Fatalf("one key at once: %v %v and %v %v; want one execution", a.x, a.err, b.x, b.err)
	}
	close(f.release)
	<-a.x.Done()
	if again, err := s.Execute(context.Background(), "a", "k"); err != nil || again.Cell() != a.x.Cell() {
		t.Fatalf("the key once its cell ended: %v %v; want %s", again, err, a.x.Cell())
	}
}

// refuseFirst is a fake runtime whose first cell does not start.
type refuseFirst struct {
	*fakeRuntime
	refused atomic.Bool
}

// errNoStart is the refusal of refuseFirst's first cell.
var errNoStart = errors.New("the cell did not start")

func (r *refuseFirst) Execute(ctx context.Context, code string, started func(cell, generation string), output func(wire.Output), outputDone func(), ended func(store.Execution, bool)) error {
	if r.refused.CompareAndSwap(false, true) {
		return errNoStart
	}
	return r.fakeRuntime.Execute(ctx, code, started, output, outputDone, ended)
}

// TestAKeyWhoseCellDidNotStartIsForgotten gives a key whose cell could not start: the
// key names nothing, and the next request of it runs the cell.
func TestAKeyWhoseCellDidNotStartIsForgotten(t *testing.T) {
	d, err := Start(context.Background(), Options{Dir: t.TempDir(), IdleTimeout: -1,
		Open: func(ctx context.Context, cfg Config, st *store.Store) (Runtime, error) {
			sess, err := st.SessionByName(ctx, cfg.ID)
			if err != nil {
				return nil, err
			}
			f := &fakeRuntime{st: st, session: sess.ID, release: make(chan struct{}), closed: make(chan struct{})}
			close(f.release)
			return &refuseFirst{fakeRuntime: f}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	s, err := d.Create(context.Background(), Config{ID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Execute(context.Background(), "a", "k"); !errors.Is(err, errNoStart) {
		t.Fatalf("a cell that cannot start: %v", err)
	}
	x, err := s.Execute(context.Background(), "a", "k")
	if err != nil || x.Cell() != "c-1" {
		t.Fatalf("the key again: %v %v; want its cell run", x, err)
	}
	<-x.Done()
}

// TestPruneOlderThan forgets the sessions stopped longer ago than the age it is given,
// and keeps those stopped since.
func TestPruneOlderThan(t *testing.T) {
	d, opened := startFake(t, time.Hour)
	stop := func(id string) time.Time {
		t.Helper()
		s, err := d.Create(context.Background(), Config{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		f := <-opened
		if err := s.Stop("by the test"); err != nil {
			t.Fatal(err)
		}
		<-f.closed
		return *s.Info().StoppedAt
	}
	old := stop("old")
	poll.Until(t, time.Minute, func() bool { return time.Since(old) >= 2*time.Second })
	stop("new")
	if gone, err := d.Prune(time.Since(old) - time.Second); err != nil || !slices.Equal(gone, []string{"old"}) {
		t.Fatalf("prune of those stopped before the second: %v %v; want old alone", gone, err)
	}
	if _, err := d.Session("new"); err != nil {
		t.Fatalf("the session stopped since: %v", err)
	}
	if _, err := d.Prune(-time.Second); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a negative age: %v", err)
	}
}

// TestRetentionPrunesStoppedSessions: a daemon with a retention forgets a stopped session
// once it has been stopped that long, by itself, and keeps an open one.
func TestRetentionPrunesStoppedSessions(t *testing.T) {
	opened := make(chan *fakeRuntime, 8)
	d, err := Start(context.Background(), Options{Dir: t.TempDir(), Retention: 200 * time.Millisecond,
		Open: func(ctx context.Context, cfg Config, st *store.Store) (Runtime, error) {
			f := &fakeRuntime{st: st, release: make(chan struct{}), closed: make(chan struct{})}
			opened <- f
			return f, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, id := range []string{"stopped", "open"} {
		if _, err := d.Create(context.Background(), Config{ID: id}); err != nil {
			t.Fatal(err)
		}
		<-opened
	}
	s, _ := d.Session("stopped")
	if err := s.Stop("by the test"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() bool {
		_, err := d.Session("stopped")
		return errors.Is(err, ErrNoSession)
	})
	if _, err := d.Session("open"); err != nil {
		t.Fatalf("the open session: %v", err)
	}
}

func TestASessionOpensOnlyWithTheMemoryForIt(t *testing.T) {
	var available atomic.Int64
	d, opened := startFakeWith(t, Options{IdleTimeout: -1, MemAvailable: func() (int64, error) { return available.Load(), nil }})
	go func() {
		for range opened {
		}
	}()
	defer close(opened)
	ctx := context.Background()
	at := int64(admission.SessionBytes + admission.ReserveBytes)
	available.Store(at)
	if _, err := d.Create(ctx, Config{ID: "first"}); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	available.Store(at - 1)
	_, err := d.Create(ctx, Config{ID: "second"})
	if !errors.Is(err, admission.ErrNoMemory) || !strings.Contains(err.Error(), "idle longest: first") {
		t.Fatalf("one byte short: %v", err)
	}
	if _, err := d.Session("second"); !errors.Is(err, ErrNoSession) {
		t.Fatalf("a refused session is listed: %v", err)
	}
	available.Store(at)
	if _, err := d.Create(ctx, Config{ID: "second"}); err != nil {
		t.Fatalf("with room again: %v", err)
	}
}
