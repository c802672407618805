package store

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kilnrt/kiln/internal/procfs"
)

func TestALeaseHasOneHolderUntilReleased(t *testing.T) {
	ctx := context.Background()
	ephemeral, _ := openEphemeral(t)
	for _, st := range []*Store{openTemp(t), ephemeral} {
		l, err := st.AcquireLease(ctx, "session:a")
		if err != nil || l.TookOver != nil {
			t.Fatalf("first: %v %+v", err, l)
		}
		_, err = st.AcquireLease(ctx, "session:a")
		var held *LeaseHeldError
		if !errors.Is(err, ErrLeaseHeld) || !errors.As(err, &held) || held.Holder.Pid != os.Getpid() ||
			!strings.Contains(err.Error(), "lease session:a is held by pid "+strconv.Itoa(os.Getpid())) {
			t.Fatalf("second: %v; want ErrLeaseHeld naming this process", err)
		}
		if other, err := st.AcquireLease(ctx, "session:b"); err != nil {
			t.Fatalf("another key: %v", err)
		} else {
			other.Release(ctx)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("released twice: %v", err)
		}
		again, err := st.AcquireLease(ctx, "session:a")
		if err != nil || again.TookOver != nil {
			t.Fatalf("after release: %v %+v", err, again)
		}
		l.Release(ctx) // a stale Lease does not release the new holder's
		if h, living, err := st.LeaseHolder(ctx, "session:a"); err != nil || !living || h.Pid != os.Getpid() {
			t.Errorf("after a stale release: %+v %v %v; want held", h, living, err)
		}
		again.Release(ctx)
	}
}

// setHolder records h as the holder of key, as another process would have.
func setHolder(t *testing.T, st *Store, key string, h Holder) {
	t.Helper()
	err := st.Update(context.Background(), func(tx *Tx) error {
		_, err := tx.exec(`INSERT OR REPLACE INTO leases (key, token, pid, start, hostname, acquired_at_ms) VALUES (?, 'x', ?, ?, ?, 1)`,
			key, h.Pid, h.Start, h.Hostname)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestALeaseIsTakenOverFromADeadHolderOnly(t *testing.T) {
	ctx := context.Background()
	st := openTemp(t)
	me, err := self()
	if err != nil || me.Start == "" {
		t.Fatalf("%+v %v: no start identity from /proc", me, err)
	}
	sleeper := exec.Command("sleep", "100")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Wait()
	defer sleeper.Process.Kill()
	living := Holder{Pid: sleeper.Process.Pid, Start: startIdentity(sleeper.Process.Pid), Hostname: me.Hostname}
	setHolder(t, st, "k", living)
	if _, err := st.AcquireLease(ctx, "k"); !errors.Is(err, ErrLeaseHeld) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(living.Pid)) {
		t.Fatalf("held by a living process: %v; want ErrLeaseHeld naming it", err)
	}
	// Killed and not yet reaped, a zombie: dead all the same.
	sleeper.Process.Signal(syscall.SIGKILL)
	for procfs.Alive(living.Pid) {
		runtime.Gosched() // readiness: its state turns Z as it exits
	}
	l, err := st.AcquireLease(ctx, "k")
	if err != nil || l.TookOver == nil || l.TookOver.Pid != living.Pid {
		t.Fatalf("held by a zombie: %v %+v; want taken over", err, l)
	}
	l.Release(ctx)
	sleeper.Wait()
	setHolder(t, st, "k", living)
	l, err = st.AcquireLease(ctx, "k")
	if err != nil || l.TookOver == nil || l.TookOver.Pid != living.Pid {
		t.Fatalf("held by a dead process: %v %+v; want taken over", err, l)
	}
	l.Release(ctx)

	// This process's pid with another start: a reused pid, not the holder.
	reused := startIdentity(me.Pid) + "0" + strings.TrimPrefix(me.Start, startIdentity(me.Pid))
	setHolder(t, st, "k", Holder{Pid: me.Pid, Start: reused, Hostname: me.Hostname})
	if l, err := st.AcquireLease(ctx, "k"); err != nil || l.TookOver == nil {
		t.Fatalf("a reused pid: %v; want taken over", err)
	} else {
		l.Release(ctx)
	}
	// Another machine's holder cannot be checked from here: it holds.
	setHolder(t, st, "k", Holder{Pid: me.Pid, Start: me.Start, Hostname: me.Hostname + ".elsewhere"})
	if _, err := st.AcquireLease(ctx, "k"); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("another machine's holder: %v; want ErrLeaseHeld", err)
	}
}

func TestStartTime(t *testing.T) {
	for _, c := range []struct {
		stat string
		want string
		ok   bool
	}{
		{"1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 42 100 200", "42", true},
		{"7 (a) (b c) R 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 99 100 200", "99", true},
		{"7 (a) R 0 1", "", false},
		{"no parenthesis", "", false},
	} {
		got, ok := startTime([]byte(c.stat))
		if got != c.want || ok != c.ok {
			t.Errorf("startTime(%q) = %q, %v; want %q, %v", c.stat, got, ok, c.want, c.ok)
		}
	}
}

func TestEndAbandonedClosesRunningExecutionsOnly(t *testing.T) {
	ctx := context.Background()
	st := openTemp(t)
	sess, _ := st.CreateSession(ctx, "s")
	done, _ := st.StartExecution(ctx, sess.ID, "g-1", "1")
	if err := st.EndExecution(ctx, done, ExecutionEnd{Status: "ok"}); err != nil {
		t.Fatal(err)
	}
	left, _ := st.StartExecution(ctx, sess.ID, "g-1", "2")
	cells, err := st.EndAbandoned(ctx, sess.ID)
	if err != nil || len(cells) != 1 || cells[0] != left.CellID {
		t.Fatalf("got %v %v; want [%s]", cells, err, left.CellID)
	}
	e, _ := st.ExecutionByCell(ctx, sess.ID, left.CellID)
	if e.Status != StatusFailed || e.Error == nil || *e.Error != HostEndedMessage || e.EndedAt == nil || !e.NamespaceLost {
		t.Errorf("abandoned: %+v", e)
	}
	if e, _ := st.ExecutionByCell(ctx, sess.ID, done.CellID); e.Status != "ok" {
		t.Errorf("ended before: %+v", e)
	}
	entries, _ := st.Log(ctx, LogFilter{Session: sess.ID})
	if last := entries[len(entries)-1]; last.Kind != KindExecutionEnd || last.Ref != left.ID {
		t.Errorf("the journal ends with %+v; want the abandoned execution's end", last)
	}
	if cells, err := st.EndAbandoned(ctx, sess.ID); err != nil || len(cells) != 0 {
		t.Errorf("again: %v %v; want none", cells, err)
	}
}

// HoldSession makes the session, takes its lease and ends its abandoned cells in one
// transaction; a lease a living holder has refuses it with nothing written.
func TestHoldSessionTakesTheSessionInOneTransaction(t *testing.T) {
	ctx := context.Background()
	st := openTemp(t)
	first, err := st.HoldSession(ctx, "s")
	if err != nil || !first.Created || first.Session.Name != "s" || first.Lease.Key() != SessionLeaseKey("s") ||
		first.Lease.TookOver != nil || len(first.Abandoned) != 0 {
		t.Fatalf("first: %+v %v; want the session made and its lease taken", first, err)
	}
	left, _ := st.StartExecution(ctx, first.Session.ID, "g-1", "1")
	commits := st.commits.Load()
	if _, err := st.HoldSession(ctx, "s"); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("held: %v; want ErrLeaseHeld", err)
	}
	if e, _ := st.ExecutionByCell(ctx, first.Session.ID, left.CellID); e.Status != StatusRunning {
		t.Errorf("a refused hold ended a cell: %+v", e)
	}
	if _, err := st.HoldSession(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SessionByName(ctx, "other"); err != nil {
		t.Fatalf("a held session is recorded: %v", err)
	}
	if n := st.commits.Load() - commits; n != 1 {
		t.Errorf("%d commits for a refused hold and a hold; want 1", n)
	}
	first.Lease.Release(ctx)
	again, err := st.HoldSession(ctx, "s")
	if err != nil || again.Created || again.Session.ID != first.Session.ID || len(again.Abandoned) != 1 ||
		again.Abandoned[0] != left.CellID {
		t.Fatalf("again: %+v %v; want the session as it was, %s abandoned", again, err, left.CellID)
	}
	if e, _ := st.ExecutionByCell(ctx, first.Session.ID, left.CellID); e.Status != StatusFailed || !e.NamespaceLost {
		t.Errorf("abandoned: %+v", e)
	}
}

func FuzzStartTime(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 42 100 200"))
	f.Add([]byte("7 (a) (b c) R 0 1"))
	f.Add([]byte(")"))
	f.Fuzz(func(t *testing.T, stat []byte) {
		got, ok := startTime(stat)
		if ok != (got != "") || strings.ContainsAny(got, " \t\n\r\v\f") {
			t.Fatalf("startTime(%q) = %q, %v", stat, got, ok)
		}
	})
}
