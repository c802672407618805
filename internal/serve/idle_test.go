package serve

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/agentrun"
	"github.com/kilnrt/kiln/internal/store"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// scriptAgent is a configuration whose sessions run an agent, on a script route.
func scriptAgent(t *testing.T) *agentrun.Config {
	t.Helper()
	dir := t.TempDir()
	toml := "[routes.test]\nkind = \"script\"\nscript = \"replies.jsonl\"\n\n[agent]\nroute = \"test\"\n"
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := agentrun.LoadConfig(filepath.Join(dir, "kiln.toml"), false)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// An agent session's idle timeout that passes while an input is being recorded, or once
// it is recorded but before the agent took it, leaves the session open: stopping it
// would leave the input untaken, its turn never run. Once the agent took it, the
// session idles. The clock is moved past the timeout at each of those moments and the
// idle check run there.
func TestAnInputHoldsItsSessionOpenUntilItsAgentTakesIt(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	d, opened := startFakeWith(t, Options{Agent: scriptAgent(t), Clock: clock.Now, IdleTimeout: time.Hour})
	s, err := d.Create(t.Context(), Config{ID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	f := <-opened
	f.inputEntered, f.inputGate = make(chan struct{}), make(chan struct{})
	recorded := make(chan store.Event, 1)
	go func() {
		ev, err := s.Input(context.Background(), "wake up")
		if err != nil {
			t.Error(err)
		}
		recorded <- ev
	}()
	idleNow := func(when, want string) {
		t.Helper()
		clock.advance(2 * time.Hour)
		s.idleCheck()
		if in := s.Info(); in.State != want {
			t.Fatalf("the idle timeout passed %s: the session is %s (%s); want %s", when, in.State, in.StopReason, want)
		}
	}

	<-f.inputEntered
	idleNow("while the input was being recorded", StateOpen)
	close(f.inputGate)
	ev := <-recorded
	idleNow("once the input was recorded, before the agent took it", StateOpen)
	if err := d.store.Update(t.Context(), func(tx *store.Tx) error { return tx.Deliver(ev.SessionID, ev.ID) }); err != nil {
		t.Fatal(err)
	}
	idleNow("once the agent took the input", StateStopped)
}

// A session is checked again once its timeout has passed since it was last active; one
// busy past its timeout, a whole timeout later: never at once, which would check (and
// read the record) over and over while a long cell runs or an input waits.
func TestAnIdleCheckComesBackAfterATimeout(t *testing.T) {
	for _, c := range []struct{ idleFor, want time.Duration }{
		{0, time.Hour},
		{time.Minute, 59 * time.Minute},
		{time.Hour - time.Millisecond, time.Millisecond},
		{time.Hour, time.Hour},
		{3 * time.Hour, time.Hour},
	} {
		if got := recheckIn(time.Hour, c.idleFor); got != c.want {
			t.Errorf("idle for %s of an hour's timeout: checked again in %s; want %s", c.idleFor, got, c.want)
		}
	}
}
