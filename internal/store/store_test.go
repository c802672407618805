package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/perfstat"
)

// journalKinds is the kinds of session's journal entries, in order, one space between.
func journalKinds(t *testing.T, s *Store, session int64) string {
	t.Helper()
	entries, err := s.Log(context.Background(), LogFilter{Session: session})
	if err != nil {
		t.Fatal(err)
	}
	kinds := make([]string, len(entries))
	for i, e := range entries {
		kinds[i] = e.Kind
	}
	return strings.Join(kinds, " ")
}

func openTemp(t testing.TB) *Store {
	t.Helper()
	s, err := OpenDir(context.Background(), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestDefaultDir(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
		err  error
	}{
		{map[string]string{"XDG_DATA_HOME": "/x/data", "HOME": "/home/a"}, "/x/data/kiln", nil},
		{map[string]string{"HOME": "/home/a"}, "/home/a/.local/share/kiln", nil},
		{map[string]string{"XDG_DATA_HOME": "relative", "HOME": "/home/a"}, "/home/a/.local/share/kiln", nil},
		{map[string]string{}, "", ErrNoDataDir},
	} {
		got, err := DefaultDir(func(k string) string { return c.env[k] })
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("DefaultDir(%v) = %q, %v; want %q, %v", c.env, got, err, c.want, c.err)
		}
	}
}

func TestOpenCreatesMigratesAndReopens(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "a", "b")
	s, err := OpenDir(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Version(ctx); v != SchemaVersion || err != nil {
		t.Errorf("version %d, %v; want %d", v, err, SchemaVersion)
	}
	if abs, _ := filepath.Abs(dir); s.Dir() != abs {
		t.Errorf("Dir %q; want %q", s.Dir(), abs)
	}
	if got := len(migrations(&sqliteDialect)); got != SchemaVersion {
		t.Errorf("%d migrations; SchemaVersion is %d", got, SchemaVersion)
	}
	var mode string
	sqliteOf(s).db.QueryRow("PRAGMA journal_mode").Scan(&mode)
	var fk int
	sqliteOf(s).db.QueryRow("PRAGMA foreign_keys").Scan(&fk)
	if mode != "wal" || fk != 1 {
		t.Errorf("journal_mode %q foreign_keys %d; want wal 1", mode, fk)
	}
	if _, err := s.CreateSession(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = OpenDir(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.SessionByName(ctx, "one"); err != nil {
		t.Errorf("after reopening: %v", err)
	}
	if err := s.Check(ctx); err != nil {
		t.Error(err)
	}
	sqliteOf(s).db.Exec(`UPDATE schema_version SET version = ?`, SchemaVersion+1)
	s.Close()
	if _, err := OpenDir(ctx, dir, Options{}); !errors.Is(err, ErrSchemaTooNew) {
		t.Errorf("opening a newer schema: %v; want ErrSchemaTooNew", err)
	}
}

func TestEphemeralStore(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, created, err := s.EnsureSession(ctx, "root")
	if err != nil || !created || s.Path() != "" || s.Dir() != "" {
		t.Fatalf("got %v %v %v %q %q", sess, created, err, s.Path(), s.Dir())
	}
	if _, err := s.AppendEvent(ctx, sess.ID, SourceOperator, map[string]string{"text": "hi"}); err != nil {
		t.Fatal(err)
	}
}

func TestSessionsContinue(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	sess, created, err := s.EnsureSession(ctx, "agent")
	if err != nil || !created {
		t.Fatal(created, err)
	}
	var names []string
	for range 2 {
		g, err := s.NextGeneration(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, g)
		e, err := s.StartExecution(ctx, sess.ID, g, "1 + 1")
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, e.CellID)
	}
	again, created, err := s.EnsureSession(ctx, "agent")
	if err != nil || created || again.ID != sess.ID {
		t.Fatalf("EnsureSession again: %v %v %v", again, created, err)
	}
	g, _ := s.NextGeneration(ctx, sess.ID)
	names = append(names, g)
	if want := []string{"g-1", "c-1", "g-2", "c-2", "g-3"}; !slices.Equal(names, want) {
		t.Errorf("got %v; want %v", names, want)
	}
	if _, err := s.CreateSession(ctx, "agent"); err == nil {
		t.Error("a second session of one name was created")
	}
	if _, err := s.SessionByName(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown session: %v; want ErrNotFound", err)
	}
}

// TestExecutionRecord ends a cell twice, through the backlog of a Store with files and
// through a transaction in an ephemeral one: the first end is recorded, once, and the
// second changes nothing, an error where it takes a transaction.
func TestExecutionRecord(t *testing.T) {
	ctx := context.Background()
	ephemeral, err := Open(ctx, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ephemeral.Close()
	for _, s := range []*Store{openTemp(t), ephemeral} {
		sess, _ := s.CreateSession(ctx, "x")
		e, err := s.StartExecution(ctx, sess.ID, "g-1", "print('hi')")
		if err != nil {
			t.Fatal(err)
		}
		msg := "boom"
		end := ExecutionEnd{Status: "yielded", ReportedStatus: "ok", Output: jsontext.Value(`[{"stream":"stdout","text":"hi\n"}]`), Error: &msg}
		if err := s.EndExecution(ctx, e, end); err != nil {
			t.Fatal(err)
		}
		second := ExecutionEnd{Status: "failed"}
		if err := s.EndExecution(ctx, e, second); s.backlog == nil && !errors.Is(err, ErrNotFound) || s.backlog != nil && err != nil {
			t.Errorf("ending twice (backlog %v): %v; want ErrNotFound from a transaction, nil from the backlog", s.backlog != nil, err)
		}
		got, err := s.ExecutionByCell(ctx, sess.ID, "c-1")
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte("print('hi')"))
		if got.Status != "yielded" || *got.ReportedStatus != "ok" || *got.Error != "boom" || got.EndedAt == nil ||
			got.CodeSHA256 != hex.EncodeToString(sum[:]) || got.Code != "print('hi')" || string(got.Output) != string(end.Output) {
			t.Errorf("got %+v", got)
		}
		if got, want := journalKinds(t, s, sess.ID), "session execution execution.end"; got != want {
			t.Errorf("the journal (backlog %v): %s; want %s", s.backlog != nil, got, want)
		}
	}
}

func TestEventPayloadLimit(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	sess, _ := s.CreateSession(ctx, "x")
	// A JSON string of n bytes encodes as n+2.
	at := strings.Repeat("a", MaxEventPayloadBytes-2)
	if _, err := s.AppendEvent(ctx, sess.ID, SourceOperator, at); err != nil {
		t.Errorf("payload of exactly %d bytes: %v", MaxEventPayloadBytes, err)
	}
	if _, err := s.AppendEvent(ctx, sess.ID, SourceOperator, at+"a"); !errors.Is(err, ErrInvalid) {
		t.Errorf("payload one byte over: %v; want ErrInvalid", err)
	}
}

func TestWaitsPendingInputAndWaking(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	sess, _ := s.CreateSession(ctx, "x")
	s.AppendEvent(ctx, sess.ID, SourceAgent, map[string]string{"text": "my own words"})
	ev, _ := s.AppendEvent(ctx, sess.ID, SourceOperator, map[string]string{"text": "first"})
	s.AppendEvent(ctx, sess.ID, SourceAgent, map[string]string{"text": "my own words again"})
	if p, _, err := s.PendingEventsAsOf(ctx, sess.ID, 10); err != nil || len(p) != 1 || p[0].ID != ev.ID {
		t.Fatalf("pending as of now: %v %v; want the operator's input alone", p, err)
	}
	var pending []Event
	err := s.Update(ctx, func(tx *Tx) error {
		var err error
		pending, err = tx.PendingEvents(sess.ID, 10)
		if err != nil {
			return err
		}
		return tx.Deliver(sess.ID, pending[len(pending)-1].ID)
	})
	if err != nil || len(pending) != 1 || pending[0].ID != ev.ID {
		t.Fatalf("pending %v, %v", pending, err)
	}
	// Now nothing is pending: a wait records and stays open until an input arrives.
	var w Wait
	err = s.Update(ctx, func(tx *Tx) error {
		if p, err := tx.PendingEvents(sess.ID, 10); err != nil || len(p) != 0 {
			t.Errorf("still pending: %v %v", p, err)
		}
		req := Request{SessionID: sess.ID, Generation: "g-1", ExecutionID: "c-1", RequestID: "r-1", Method: "runtime.wait", Body: jsontext.Value(`{"method":"runtime.wait"}`)}
		if err := tx.InsertRequest(&req); err != nil {
			return err
		}
		secs := 5.0
		deadline := tx.Now().Add(5 * time.Second)
		w = Wait{RequestID: req.ID, SessionID: sess.ID, ExecutionID: "c-1", Seconds: &secs, Reason: "r", Deadline: &deadline, State: WaitWaiting}
		if err := tx.InsertWait(&w); err != nil {
			return err
		}
		return tx.InsertReply(sess.ID, req.ID, Reply{Kind: "ok", Value: jsontext.Value(`{"status":"yielded"}`)})
	})
	if err != nil {
		t.Fatal(err)
	}
	woke, _ := s.AppendEvent(ctx, sess.ID, SourceOperator, map[string]string{"text": "wake up"})
	got, err := s.WaitByID(ctx, sess.ID, w.ID)
	if err != nil || got.State != WaitWoken || got.EventID == nil || *got.EventID != woke.ID {
		t.Errorf("after the input: %+v %v; want woken by event %d", got, err, woke.ID)
	}
	if _, err := s.WaitByID(ctx, sess.ID+1, w.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("another session's wait: %v", err)
	}
}

func TestRequestsEffectsAndTheLog(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	a, _ := s.CreateSession(ctx, "a")
	b, _ := s.CreateSession(ctx, "b")
	req := Request{SessionID: a.ID, Generation: "g-1", ExecutionID: "c-1", RequestID: "r-1", Method: "workspace.run", Body: jsontext.Value(`{"method":"workspace.run"}`)}
	var effect int64
	err := s.Update(ctx, func(tx *Tx) error {
		if err := tx.InsertRequest(&req); err != nil {
			return err
		}
		var err error
		effect, err = tx.StartEffect(a.ID, req.ID, "workspace.run", map[string]any{"argv": []string{"true"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, reply, err := s.RequestByID(ctx, a.ID, req.ID); err != nil || reply != nil {
		t.Errorf("unanswered request: reply %v, %v", reply, err)
	}
	err = s.Update(ctx, func(tx *Tx) error {
		if err := tx.FinishEffect(a.ID, effect, map[string]int{"exit_code": 0}); err != nil {
			return err
		}
		return tx.InsertReply(a.ID, req.ID, Reply{Kind: "ok", Value: jsontext.Value(`{"exit_code":0}`)})
	})
	if err != nil {
		t.Fatal(err)
	}
	s.AppendEvent(ctx, b.ID, SourceOperator, "for b")
	all, err := s.Log(ctx, LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range all {
		kinds = append(kinds, e.Kind)
	}
	want := []string{KindSession, KindSession, KindRequest, KindEffect, KindReceipt, KindReply, KindEvent}
	if !slices.Equal(kinds, want) {
		t.Errorf("kinds %v; want %v", kinds, want)
	}
	onlyA, _ := s.Log(ctx, LogFilter{Session: a.ID, Since: all[2].Seq})
	if len(onlyA) != 3 || onlyA[0].Kind != KindEffect {
		t.Errorf("session a since %d: %+v", all[2].Seq, onlyA)
	}
	if rec, ok := all[5].Record.(RequestRecord); !ok || rec.Reply == nil || string(rec.Reply.Value) != `{"exit_code":0}` {
		t.Errorf("reply entry: %+v", all[5].Record)
	}
	if err := s.Check(ctx); err != nil {
		t.Error(err)
	}
}

// BenchmarkAppendEvent is one durable event append: one committed transaction.
func BenchmarkAppendEvent(b *testing.B) {
	s := openTemp(b)
	ctx := context.Background()
	sess, _ := s.CreateSession(ctx, "bench")
	samples := make([]time.Duration, 0, b.N)
	start := time.Now()
	for b.Loop() {
		t0 := time.Now()
		if _, err := s.AppendEvent(ctx, sess.ID, SourceOperator, map[string]string{"text": "hello"}); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(t0))
	}
	elapsed := time.Since(start)
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1000, "median-µs")
	b.ReportMetric(float64(len(samples))/elapsed.Seconds(), "appends/s")
}

func TestAGenerationEndsOnceInTheJournal(t *testing.T) {
	s, sess := openEphemeral(t)
	ctx := context.Background()
	if err := s.EndGeneration(ctx, sess.ID, "g-1", "never started"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ending a generation that never started: %v; want ErrNotFound", err)
	}
	if _, err := s.RecordKernelReset(ctx, sess.ID, "g-1", map[string]string{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.EndGeneration(ctx, sess.ID, "g-1", "python exit status 7"); err != nil {
		t.Fatal(err)
	}
	if err := s.EndGeneration(ctx, sess.ID, "g-1", "again"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a second end: %v; want ErrNotFound", err)
	}
	entries, err := s.Log(ctx, LogFilter{Session: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	last := entries[len(entries)-1]
	kr, _ := last.Record.(KernelReset)
	if last.Kind != KindKernelEnd || kr.EndedAt == nil || kr.EndCause == nil || *kr.EndCause != "python exit status 7" {
		t.Errorf("the last entry: %s %+v; want g-1's end and its cause", last.Kind, last.Record)
	}
}

// BenchmarkCellRecord is what a trivial cell costs the record, in a file as a workbench
// keeps it: its start and its end, by two committed transactions (transaction), or its
// start in the backlog and its end by one, as a workbench records every cell after its
// first (backlog). The figures are p50, p99 and CPU per cell.
func BenchmarkCellRecord(b *testing.B) {
	for _, next := range []bool{false, true} {
		name := map[bool]string{false: "transaction", true: "backlog"}[next]
		b.Run(name, func(b *testing.B) {
			s := openTemp(b)
			// As a cell's context is: one that can be cancelled.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sess, _ := s.CreateSession(ctx, "bench")
			end := ExecutionEnd{Status: "ok", Output: []byte(`[{"stream":"result","text":"2"}]`)}
			prev, err := s.StartExecution(ctx, sess.ID, "g-1", "1+1")
			if err == nil {
				err = s.EndExecution(ctx, prev, end)
			}
			if err != nil {
				b.Fatal(err)
			}
			m := perfstat.Start()
			for b.Loop() {
				t0 := time.Now()
				start := func() (Execution, error) { return s.StartExecution(ctx, sess.ID, "g-1", "1+1") }
				if next {
					start = func() (Execution, error) { return s.StartNextExecution(ctx, prev, "g-1", "1+1") }
				}
				e, err := start()
				if err == nil {
					err = s.EndExecution(ctx, e, end)
				}
				if err != nil {
					b.Fatal(err)
				}
				prev = e
				m.Add(time.Since(t0))
			}
			m.Report(b, b.N)
		})
	}
}

// openWait records an accepted wait of the session's cell, waiting.
func openWait(t *testing.T, s *Store, session int64, generation, cell string) Wait {
	t.Helper()
	var w Wait
	err := s.Update(context.Background(), func(tx *Tx) error {
		req := Request{SessionID: session, Generation: generation, ExecutionID: cell, RequestID: "r-1", Method: "runtime.wait",
			Body: jsontext.Value(`{"method":"runtime.wait"}`)}
		if err := tx.InsertRequest(&req); err != nil {
			return err
		}
		w = Wait{RequestID: req.ID, SessionID: session, ExecutionID: cell, Reason: "r", State: WaitWaiting}
		return tx.InsertWait(&w)
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestACellsStartSupersedesTheOpenWaitAndReadsThePolicy(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	sess, _ := s.CreateSession(ctx, "a")
	other, _ := s.CreateSession(ctx, "b")
	open := func(session int64, cell string) Wait { return openWait(t, s, session, "g-1", cell) }
	waitEnds := func() int {
		t.Helper()
		entries, err := s.Log(ctx, LogFilter{Session: sess.ID})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range entries {
			if e.Kind == KindWaitEnd {
				n++
			}
		}
		return n
	}
	if _, err := s.StartExecution(ctx, sess.ID, "g-1", "1"); err != nil || waitEnds() != 0 {
		t.Fatalf("a start with no wait open: %v, %d wait ends", err, waitEnds())
	}
	w, theirs := open(sess.ID, "c-1"), open(other.ID, "c-1")
	if _, err := s.ActivateBehavior(ctx, 0, "release-1"); err != nil {
		t.Fatal(err)
	}
	e, err := s.StartExecution(ctx, sess.ID, "g-1", "2")
	if err != nil || e.CellID != "c-2" || e.Behavior.Epoch != 1 || e.Behavior.ReleaseID != "release-1" || e.Behavior.ActivatedAt.IsZero() {
		t.Fatalf("the start: %+v %v; want c-2 under epoch 1, release-1", e, err)
	}
	if got, err := s.WaitByID(ctx, sess.ID, w.ID); err != nil || got.State != WaitSuperseded || waitEnds() != 1 {
		t.Errorf("the session's wait: %+v %v, %d wait ends; want superseded, journaled once", got, err, waitEnds())
	}
	if got, err := s.WaitByID(ctx, other.ID, theirs.ID); err != nil || got.State != WaitWaiting {
		t.Errorf("another session's wait: %+v %v; want still waiting", got, err)
	}
}

func TestANextCellsStartGoesThroughTheBacklogUnlessAWaitMayBeOpen(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	sess, _ := s.CreateSession(ctx, "a")
	first, err := s.StartExecution(ctx, sess.ID, "g-1", "1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EndExecution(ctx, first, ExecutionEnd{Status: "ok"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ActivateBehavior(ctx, 0, "release-1"); err != nil {
		t.Fatal(err)
	}
	second, err := s.StartNextExecution(ctx, first, "g-2", "2")
	if err != nil || second.CellID != "c-2" || second.Generation != "g-2" || second.Behavior.Epoch != 1 ||
		second.Behavior.ReleaseID != "release-1" {
		t.Fatalf("the next start: %+v %v; want c-2 of g-2 under epoch 1", second, err)
	}
	s.backlog.mu.Lock()
	records, _, err := parseBacklog(s.backlog.current.mem, 0)
	s.backlog.mu.Unlock()
	// c-1's end, folded by the activation's transaction, and c-2's start.
	if err != nil || len(records) != 2 || records[0].End == nil || records[0].ExecutionID != "c-1" ||
		records[1].Start == nil || records[1].Start.Code != "2" {
		t.Fatalf("the backlog: %+v %v; want c-1's end and c-2's start", records, err)
	}
	// A reader of this Store sees the cell running.
	if got, err := s.ExecutionByCell(ctx, sess.ID, "c-2"); err != nil || got.Status != StatusRunning ||
		!got.StartedAt.Equal(second.StartedAt) || got.CodeSHA256 != second.CodeSHA256 {
		t.Fatalf("c-2 while it runs: %+v %v; want running since %v", got, err, second.StartedAt)
	}
	if err := s.EndExecution(ctx, second, ExecutionEnd{Status: "ok"}); err != nil {
		t.Fatal(err)
	}
	// A wait this Store recorded may be open: the next start takes a transaction, which
	// supersedes it.
	w := openWait(t, s, sess.ID, "g-2", "c-2")
	third, err := s.StartNextExecution(ctx, second, "g-2", "3")
	if err != nil || third.CellID != "c-3" {
		t.Fatalf("the start after a wait: %+v %v; want c-3", third, err)
	}
	if got, err := s.WaitByID(ctx, sess.ID, w.ID); err != nil || got.State != WaitSuperseded {
		t.Errorf("the wait: %+v %v; want superseded", got, err)
	}
	if err := s.EndExecution(ctx, third, ExecutionEnd{Status: "ok"}); err != nil {
		t.Fatal(err)
	}
	fourth, err := s.StartNextExecution(ctx, third, "g-2", "4")
	if err != nil || fourth.CellID != "c-4" {
		t.Fatalf("the start after that: %+v %v; want c-4", fourth, err)
	}
	msg := "boom"
	end := ExecutionEnd{Status: "error", ReportedStatus: "ok", Output: jsontext.Value(`[{"stream":"stdout","text":"4"}]`),
		TruncatedBytes: 3, Error: &msg, Limit: "timeout", EndedAt: fourth.StartedAt.Add(time.Second)}
	if err := s.EndExecution(ctx, fourth, end); err != nil {
		t.Fatal(err)
	}
	got, err := s.ExecutionByCell(ctx, sess.ID, "c-4")
	if err != nil || got.Status != "error" || got.ReportedStatus == nil || *got.ReportedStatus != "ok" ||
		string(got.Output) != string(end.Output) || got.TruncatedBytes != 3 || got.Error == nil || *got.Error != msg ||
		got.Limit != "timeout" || got.EndedAt == nil || !got.EndedAt.Equal(end.EndedAt) || !got.StartedAt.Equal(fourth.StartedAt) {
		t.Errorf("c-4, ended: %+v %v; want it as ended", got, err)
	}
	// Ended again, through the backlog: the fold leaves the second end out.
	if err := s.EndExecution(ctx, fourth, ExecutionEnd{Status: "failed"}); err != nil {
		t.Errorf("ending c-4 twice: %v", err)
	}
	want := "session execution execution.end execution execution.end request wait execution wait.end execution.end execution execution.end"
	if got := journalKinds(t, s, sess.ID); got != want {
		t.Errorf("the journal: %s; want %s", got, want)
	}
	// The database counts every cell: a transaction's start numbers after them.
	prev, err := s.StartExecution(ctx, sess.ID, "g-2", "5")
	if err != nil || prev.CellID != "c-5" {
		t.Fatalf("a start by transaction: %+v %v; want c-5", prev, err)
	}
	// Code the backlog cannot hold, at its bound and one past, or not UTF-8, starts by
	// transaction (its row has an id at once).
	for _, c := range []struct {
		code       string
		backlogged bool
	}{
		{strings.Repeat("\x01", maxBacklogCode), true},
		{strings.Repeat("\x01", maxBacklogCode+1), false},
		{"x = '\xff'", false},
	} {
		if err := s.EndExecution(ctx, prev, ExecutionEnd{Status: "ok"}); err != nil {
			t.Fatal(err)
		}
		next, err := s.StartNextExecution(ctx, prev, "g-2", c.code)
		if err != nil {
			t.Fatalf("the start of %d bytes: %v", len(c.code), err)
		}
		if backlogged := next.ID == 0; backlogged != c.backlogged {
			t.Errorf("the start of %d bytes (UTF-8 %v) went through the backlog: %v; want %v",
				len(c.code), utf8.ValidString(c.code), backlogged, c.backlogged)
		}
		prev = next
	}
}

func TestAnEphemeralStoreStartsTheNextCellByTransaction(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, _ := s.CreateSession(ctx, "a")
	first, err := s.StartExecution(ctx, sess.ID, "g-1", "1")
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.StartNextExecution(ctx, first, "g-1", "2")
	if err != nil || second.CellID != "c-2" || second.ID == 0 {
		t.Fatalf("the next start: %+v %v; want c-2, recorded", second, err)
	}
}

// sqliteOf is the SQLite engine s runs on.
func sqliteOf(s *Store) *sqliteEngine { return s.eng.(*sqliteEngine) }
