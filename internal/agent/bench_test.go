package agent_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/agent"
	"github.com/kilnrt/kiln/internal/route"
	"github.com/kilnrt/kiln/internal/store"
	"golang.org/x/sys/unix"
)

// benchRoute replies with code at once, and notes when each reply left it and each
// request reached it.
type benchRoute struct {
	replied, called time.Time
	cpuReplied      time.Duration
	steps           []time.Duration // wall time from a reply to the next request, cells excluded
	cpu             []time.Duration // the same, in CPU time of the agent's thread
	cell            time.Duration   // wall time in cells since the last reply
	cellCPU         time.Duration
	n               int
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

func (r *benchRoute) Call(ctx context.Context, req route.Request) (route.Reply, error) {
	now, cpu := time.Now(), threadCPU()
	if !r.replied.IsZero() {
		r.steps = append(r.steps, now.Sub(r.replied)-r.cell)
		r.cpu = append(r.cpu, cpu-r.cpuReplied-r.cellCPU)
	}
	r.n++
	code := fmt.Sprintf("print(%d)", r.n)
	reply := route.Reply{Call: &route.Call{ID: fmt.Sprintf("call_%d", r.n), Arguments: `{"code":"` + code + `"}`, Code: code},
		Model: "bench", StopReason: "tool_calls"}
	r.cell, r.cellCPU = 0, 0
	r.replied, r.cpuReplied = time.Now(), threadCPU()
	return reply, nil
}

// benchSession runs no Python: a cell ends at once, yielding every waitEvery-th.
type benchSession struct {
	route   *benchRoute
	cells   int
	yield   bool
	journal *agent.Journal // when set, records are written durably
}

func (s *benchSession) ID() string { return "bench" }
func (s *benchSession) Execute(ctx context.Context, code string) (agent.Cell, error) {
	began, cpu := time.Now(), threadCPU()
	s.cells++
	c := agent.Cell{ID: fmt.Sprintf("c-%d", s.cells), Status: "ok", Output: strings.Repeat("output line\n", 8), Started: began, Ended: began.Add(420 * time.Millisecond)}
	if s.yield {
		c.Status = "yielded"
	}
	s.route.cell += time.Since(began)
	s.route.cellCPU += threadCPU() - cpu
	return c, nil
}
func (s *benchSession) Pending(context.Context) ([]agent.Input, error) { return nil, nil }
func (s *benchSession) MoveHead(context.Context, []agent.Input) (agent.Header, string, error) {
	return agent.Header{}, "", nil
}
func (s *benchSession) Record(ctx context.Context, rec agent.Record) error {
	if s.journal == nil {
		return nil
	}
	return s.journal.Record(ctx, rec)
}

// BenchmarkStep is kiln's own time per step — from a model reply received to the next
// request sent, the cell excluded — with a 100-step transcript, reported as p50, p99
// and CPU per step: the loop alone (memory), and with each model call recorded in the
// durable record (durable).
func BenchmarkStep(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchStep(b, nil) })
	b.Run("durable", func(b *testing.B) {
		st, err := store.OpenDir(b.Context(), b.TempDir(), store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		sess, _, err := st.EnsureSession(b.Context(), "bench")
		if err != nil {
			b.Fatal(err)
		}
		benchStep(b, &agent.Journal{Store: st, Session: sess.ID})
	})
}

func benchStep(b *testing.B, journal *agent.Journal) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := &benchRoute{}
	s := &benchSession{route: r, journal: journal}
	a := agent.New(s, agent.Config{Step: agent.Route{Name: "bench", Client: r}, Header: agent.Header{Text: strings.Repeat("the header\n", 2000)}, MaxSteps: 100})
	if end, err := a.Turn(b.Context(), []agent.Input{input(1, "fill the transcript")}); err != nil || end.EndReason != agent.EndStepCap {
		b.Fatalf("got %+v, %v", end, err)
	}
	base := a.Conversation()
	a = agent.New(s, agent.Config{Step: agent.Route{Name: "bench", Client: r}, Header: agent.Header{Text: strings.Repeat("the header\n", 2000)}, MaxSteps: 2})
	r.steps, r.cpu = nil, nil
	for b.Loop() {
		a.Resume(agent.Header{Text: strings.Repeat("the header\n", 2000)}, "", base, 1, 0)
		r.replied = time.Time{}
		if _, err := a.Turn(b.Context(), []agent.Input{input(2, "one more")}); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(r.steps)
	slices.Sort(r.cpu)
	q := func(d []time.Duration, p float64) float64 { return float64(d[int(p*float64(len(d)-1))].Nanoseconds()) }
	b.ReportMetric(q(r.steps, 0.50), "p50-ns/step")
	b.ReportMetric(q(r.steps, 0.99), "p99-ns/step")
	b.ReportMetric(q(r.cpu, 0.50), "p50-cpu-ns/step")
	b.ReportMetric(q(r.cpu, 0.99), "p99-cpu-ns/step")
}
