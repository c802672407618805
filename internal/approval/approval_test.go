package approval_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/approval"
	"github.com/kilnrt/kiln/internal/poll"
	"github.com/kilnrt/kiln/internal/store"
)

// newGate is a gate of policy hold over a fresh in-memory record, and the record.
func newGate(t *testing.T, timeout time.Duration) (*approval.Gate, *store.Store, int64) {
	t.Helper()
	st, err := store.Open(t.Context(), "", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sess, err := st.CreateSession(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	g, err := approval.New(st, sess.ID, approval.PolicyHold, timeout, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g, st, sess.ID
}

// decisions are the decisions the record holds, in order.
func decisions(t *testing.T, st *store.Store, session int64) []approval.Decision {
	t.Helper()
	recs, err := st.AgentRecords(t.Context(), session)
	if err != nil {
		t.Fatal(err)
	}
	var out []approval.Decision
	for _, r := range recs {
		if r.Kind == store.KindDecision {
			var d approval.Decision
			if err := json.Unmarshal(r.Body, &d); err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
	}
	return out
}

// review runs g.Review in the background and waits for the cell to be held.
func review(t *testing.T, ctx context.Context, g *approval.Gate, cell string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- g.Review(ctx, 1, cell, "print(1)") }()
	poll.Until(t, 10*time.Second, func() bool {
		for _, h := range g.Held() {
			if h.Cell == cell {
				return true
			}
		}
		return false
	})
	return done
}

func TestAllowRunsUnasked(t *testing.T) {
	st, err := store.Open(t.Context(), "", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g, err := approval.New(st, 1, "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Review(t.Context(), 1, "c-1", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := approval.New(st, 1, "ask", 0, nil); err == nil {
		t.Error("an unknown policy is taken")
	}
}

// TestDecisions: an approval lets the cell run, a rejection does not and says why, a
// decision for a cell not held is ErrNotHeld, and each is recorded.
func TestDecisions(t *testing.T) {
	g, st, sess := newGate(t, time.Hour)
	done := review(t, t.Context(), g, "c-1")
	if _, err := g.Decide(t.Context(), "c-1", true, ""); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("an approved cell: %v", err)
	}
	done = review(t, t.Context(), g, "c-2")
	if _, err := g.Decide(t.Context(), "c-2", false, "too broad"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, approval.ErrRejected) || !strings.Contains(err.Error(), "too broad") {
		t.Fatalf("a rejected cell: %v", err)
	}
	if _, err := g.Decide(t.Context(), "c-2", true, ""); !errors.Is(err, approval.ErrNotHeld) {
		t.Errorf("a decision for a cell not held: %v", err)
	}
	got := decisions(t, st, sess)
	if len(got) != 2 || got[0].Decision != approval.Approved || got[1].Decision != approval.Rejected || got[1].Reason != "too broad" {
		t.Errorf("recorded: %+v", got)
	}
}

// TestTimeoutAndCancel: a hold past its timeout is a rejection, and one whose turn ends
// first is cancelled; both recorded.
func TestTimeoutAndCancel(t *testing.T) {
	g, st, sess := newGate(t, 50*time.Millisecond)
	if err := g.Review(t.Context(), 1, "c-1", "x"); !errors.Is(err, approval.ErrRejected) || !strings.Contains(err.Error(), "no decision within") {
		t.Errorf("a hold past its timeout: %v", err)
	}
	g, st, sess = newGate(t, time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	done := review(t, ctx, g, "c-2")
	cancel()
	if err := <-done; err == nil || errors.Is(err, approval.ErrRejected) {
		t.Errorf("a hold whose turn ended: %v", err)
	}
	if got := decisions(t, st, sess); len(got) != 1 || got[0].Decision != approval.Cancelled {
		t.Errorf("recorded: %+v", got)
	}
}

// TestReasonIsBoundedAndValid: a reason is kept whole at MaxReasonBytes, cut one past
// it, and made valid UTF-8.
func TestReasonIsBoundedAndValid(t *testing.T) {
	g, _, _ := newGate(t, time.Hour)
	for _, tc := range []struct {
		reason string
		whole  bool
	}{
		{strings.Repeat("r", approval.MaxReasonBytes), true},
		{strings.Repeat("r", approval.MaxReasonBytes+1), false},
		{"caf\xe9", false},
	} {
		done := review(t, t.Context(), g, "c-1")
		d, err := g.Decide(t.Context(), "c-1", false, tc.reason)
		<-done
		if err != nil || len(d.Reason) > approval.MaxReasonBytes || !utf8.ValidString(d.Reason) || (d.Reason == tc.reason) != tc.whole {
			t.Errorf("a reason of %d bytes: kept %d bytes, %v", len(tc.reason), len(d.Reason), err)
		}
	}
}

// TestRecoverHoldsAgainAfterARestart: a hold the record shows undecided is held again
// by the next host, marked restarted; its decision is recorded once and told to
// resumed; the approved code then runs once unasked. A carried hold past its timeout
// ends timeout at once.
func TestRecoverHoldsAgainAfterARestart(t *testing.T) {
	g, st, sess := newGate(t, time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	done := review(t, ctx, g, "c-1") // held, as a host that dies leaves it
	defer func() { cancel(); <-done }()
	g2, err := approval.New(st, sess, approval.PolicyHold, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	told := make(chan approval.Decision, 2)
	if err := g2.Recover(t.Context(), func(_ context.Context, held approval.Review, d approval.Decision) {
		if held.Cell != d.Cell {
			t.Errorf("told of %s with the decision of %s", held.Cell, d.Cell)
		}
		told <- d
	}); err != nil {
		t.Fatal(err)
	}
	if h := g2.Held(); len(h) != 1 || h[0].Cell != "c-1" || !h[0].Restarted {
		t.Fatalf("held after the restart: %+v", h)
	}
	if _, err := g2.Decide(t.Context(), "c-1", true, ""); err != nil {
		t.Fatal(err)
	}
	if d := <-told; d.Decision != approval.Approved {
		t.Errorf("told %+v", d)
	}
	if err := g2.Review(t.Context(), 2, "c-2", "print(1)"); err != nil {
		t.Errorf("the approved code, sent again: %v", err)
	}
	once, stop := context.WithCancel(t.Context())
	again := review(t, once, g2, "c-3")
	stop()
	if err := <-again; err == nil {
		t.Error("the approved code ran unasked twice")
	}
	got := decisions(t, st, sess)
	if len(got) != 3 || got[0].Cell != "c-1" || got[0].Decision != approval.Approved ||
		got[1].Cell != "c-2" || got[1].Decision != approval.Approved || !strings.Contains(got[1].Reason, "c-1") ||
		got[2].Decision != approval.Cancelled {
		t.Errorf("recorded: %+v", got)
	}

	_, st3, sess3 := newGate(t, time.Hour)
	if _, err := st3.AppendAgentRecord(t.Context(), sess3, store.KindReview, 1, approval.Review{Turn: 1, Cell: "c-9",
		Verdict: approval.VerdictHold, TimeoutMs: 1, HeldAt: st3.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	g3, err := approval.New(st3, sess3, approval.PolicyHold, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g3.Close()
	told3 := make(chan approval.Decision, 1)
	if err := g3.Recover(t.Context(), func(_ context.Context, _ approval.Review, d approval.Decision) { told3 <- d }); err != nil {
		t.Fatal(err)
	}
	if d := <-told3; d.Decision != approval.Timeout || d.Cell != "c-9" {
		t.Errorf("a carried hold past its timeout: %+v", d)
	}
}

// TestHookDecidesUnderAllow: under PolicyAllow the hook is asked; its allow is recorded
// and the cell runs, its hold holds the cell for the operator with its reason, and a
// policy with no entrypoint lets the cell run unrecorded.
func TestHookDecidesUnderAllow(t *testing.T) {
	st, err := store.Open(t.Context(), "", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, err := st.CreateSession(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	g, err := approval.New(st, sess.ID, approval.PolicyAllow, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	named := true
	g.Ask(func(_ context.Context, turn int64, cell, code string) (bool, string, bool) {
		return strings.Contains(code, "rm"), "it removes files", named
	})
	if err := g.Review(t.Context(), 1, "c-1", "print(1)"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Review(t.Context(), 1, "c-2", "rm()") }()
	poll.Until(t, 10*time.Second, func() bool { return len(g.Held()) == 1 })
	if h := g.Held()[0]; h.Cell != "c-2" || !strings.Contains(h.Reason, "it removes files") {
		t.Errorf("the hook's hold: %+v", h)
	}
	if _, err := g.Decide(t.Context(), "c-2", false, "no"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, approval.ErrRejected) {
		t.Errorf("a rejected cell: %v", err)
	}
	named = false
	if err := g.Review(t.Context(), 1, "c-3", "rm()"); err != nil {
		t.Errorf("no entrypoint: %v", err)
	}
	recs, err := st.AgentRecords(t.Context(), sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	var verdicts []string
	for _, r := range recs {
		if r.Kind == store.KindReview {
			var rv approval.Review
			if err := json.Unmarshal(r.Body, &rv); err != nil {
				t.Fatal(err)
			}
			verdicts = append(verdicts, rv.Cell+" "+rv.Verdict)
		}
	}
	if strings.Join(verdicts, ",") != "c-1 allow,c-2 hold" {
		t.Errorf("reviews recorded: %q", verdicts)
	}
}
