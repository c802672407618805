package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/agent"
	"github.com/kilnrt/kiln/internal/poll"
	"github.com/kilnrt/kiln/internal/route"
	"github.com/kilnrt/kiln/internal/store"
)

// commits stands in for a daemon's commit signal: notify closes the current channel.
type commits struct {
	mu sync.Mutex
	ch chan struct{}
}

func (c *commits) changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

func (c *commits) notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
	}
	c.ch = nil
}

// actorRun runs an actor over a workbench session of data directory dir until stop,
// telling ends of each turn's end.
type actorRun struct {
	s      *session
	ac     *agent.Actor
	ends   chan agent.Progress
	cancel context.CancelFunc
	done   chan error
	st     *store.Store
	c      *commits
}

func startActor(t *testing.T, dir string, replies ...route.ScriptReply) *actorRun {
	t.Helper()
	s := openSession(t, dir)
	st, err := store.OpenDir(t.Context(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sess, err := st.SessionByName(t.Context(), "root")
	if err != nil {
		t.Fatal(err)
	}
	r := &actorRun{s: s, ends: make(chan agent.Progress, 16), done: make(chan error, 1), st: st, c: &commits{}}
	inbox := agent.Inbox{Store: st, Session: sess.ID, Changed: r.c.changed}
	s.inbox = &inbox
	a := agent.New(s, agent.Config{Step: scriptRoute(replies...), Header: agent.Header{Text: "h"}, OnStep: func(p agent.Progress) {
		if p.What == "end" {
			r.ends <- p
		}
	}})
	journal := agent.Journal{Store: st, Session: sess.ID}
	s.journal = &journal
	r.ac = agent.NewActor(a, inbox, journal, nil)
	ctx, cancel := context.WithCancel(t.Context())
	r.cancel = cancel
	go func() { r.done <- r.ac.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *actorRun) stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.cancel = nil
	}
}

func (r *actorRun) input(t *testing.T, text string) {
	t.Helper()
	if _, err := r.s.wb.Input(t.Context(), text); err != nil {
		t.Fatal(err)
	}
	r.c.notify()
}

func TestActorWakesOnInputAndTimer(t *testing.T) {
	dir := t.TempDir()
	r := startActor(t, dir,
		route.ScriptReply{Code: code(sendCode)}, route.ScriptReply{Code: code(`await runtime.wait(0.2, reason="a nap")`)},
		route.ScriptReply{Code: code(waitCode)})
	r.input(t, "say hello")
	if p := <-r.ends; p.End != agent.EndWaited || p.Turn != 1 {
		t.Fatalf("turn 1: %+v", p)
	}
	// The wait's deadline wakes the agent with a timer input.
	if p := <-r.ends; p.End != agent.EndWaited || p.Turn != 2 {
		t.Fatalf("turn 2: %+v", p)
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if len(r.s.speech) != 1 || r.s.speech[0].Text != "hello, operator" {
		t.Errorf("speech %+v", r.s.speech)
	}
}

func TestActorTimerAfterRestart(t *testing.T) {
	dir := t.TempDir()
	r := startActor(t, dir, route.ScriptReply{Code: code(`await runtime.wait(0.5, reason="a nap")`)})
	r.input(t, "nap")
	if p := <-r.ends; p.End != agent.EndWaited {
		t.Fatalf("turn 1: %+v", p)
	}
	r.stop()
	r.s.wb.Close()
	// A new actor on the same record finds the wait and wakes when it ends.
	r2 := startActor(t, dir, route.ScriptReply{Code: code(waitCode)})
	if p := <-r2.ends; p.End != agent.EndWaited || p.Turn != 2 {
		t.Fatalf("the timer's turn after the restart: %+v", p)
	}
	sess, _ := r2.st.SessionByName(t.Context(), "root")
	evs, err := r2.st.Log(t.Context(), store.LogFilter{Session: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	timers := 0
	for _, e := range evs {
		if ev, ok := e.Record.(store.Event); ok && ev.Source == agent.SourceTimer {
			timers++
		}
	}
	if timers != 1 {
		t.Errorf("%d timer inputs; want 1", timers)
	}
}

// TestAWaitingAgentIsNotIdle: an agent in runtime.wait(None) says it waits, so that an
// idle timeout leaves its session open; an input ends the wait.
func TestAWaitingAgentIsNotIdle(t *testing.T) {
	r := startActor(t, t.TempDir(), route.ScriptReply{Code: code(waitCode)}, route.ScriptReply{Code: code("1")}, route.ScriptReply{Text: "done"}, route.ScriptReply{Text: "done"})
	if r.ac.Waiting() {
		t.Fatal("waiting before any turn")
	}
	r.input(t, "wait")
	if p := <-r.ends; p.End != agent.EndWaited {
		t.Fatalf("turn 1: %+v", p)
	}
	if !poll.Wait(10*time.Second, r.ac.Waiting) {
		t.Fatal("the agent does not say it waits")
	}
	r.input(t, "wake")
	if p := <-r.ends; p.End != agent.EndNoCode {
		t.Fatalf("turn 2: %+v", p)
	}
	if r.ac.Waiting() {
		t.Error("still waiting after a turn that did not wait")
	}
}
