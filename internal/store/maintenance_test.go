package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// request records a host request of method in session and returns who made it.
func request(t *testing.T, s *Store, sess Session, method string) Actor {
	t.Helper()
	req := Request{SessionID: sess.ID, Generation: "g-1", ExecutionID: "c-1", RequestID: "r", Method: method, Body: []byte(`{}`)}
	if err := s.Update(context.Background(), func(tx *Tx) error { return tx.InsertRequest(&req) }); err != nil {
		t.Fatal(err)
	}
	return Actor{SessionID: sess.ID, Session: sess.Name, ExecutionID: "c-1", RequestID: req.ID}
}

// answer records req's ok reply, value.
func answer(t *testing.T, s *Store, by Actor, value string) {
	t.Helper()
	if err := s.Update(context.Background(), func(tx *Tx) error {
		return tx.InsertReply(by.SessionID, by.RequestID, Reply{Kind: "ok", Value: []byte(value)})
	}); err != nil {
		t.Fatal(err)
	}
}

func TestWorkItemsOpenToTheirBoundAndAreAssessedOnce(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	sess, _ := s.CreateSession(ctx, "a")
	const max = 3
	var items []WorkItem
	for i := range max + 1 {
		by := request(t, s, sess, "maintenance.originate")
		it := WorkItem{Purpose: "p", Reason: "r", EvidenceRefs: []string{"event:1"}, Origin: by, Skills: map[string]string{"x": "1"}}
		err := s.Update(ctx, func(tx *Tx) error { return tx.OpenWorkItem(&it, max) })
		if i < max && err != nil || i == max && !errors.Is(err, ErrOverLimit) {
			t.Fatalf("item %d: %v", i+1, err)
		}
		if err == nil {
			items = append(items, it)
		}
	}
	if n, err := s.OpenWorkItems(ctx); n != max || err != nil {
		t.Fatalf("%d open, %v; want %d", n, err, max)
	}
	activate := request(t, s, sess, MethodBehaviorActivate)
	answer(t, s, activate, `{"epoch":1}`)
	refused := request(t, s, sess, MethodOrientationAdopt)
	if err := s.Update(ctx, func(tx *Tx) error {
		return tx.InsertReply(sess.ID, refused.RequestID, Reply{Kind: "error", Code: "orientation_conflict", Message: "m"})
	}); err != nil {
		t.Fatal(err)
	}
	adopt := request(t, s, sess, MethodOrientationAdopt)
	answer(t, s, adopt, `{"adoption":1}`)
	by := request(t, s, sess, "maintenance.assess")
	var got WorkItem
	if err := s.Update(ctx, func(tx *Tx) error {
		var err error
		got, err = tx.AssessWorkItem(items[0].ID, "changed", by, map[string]string{"x": "2", "y": "3"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c := got.Assessment.Changes
	if len(c.Activations) != 1 || len(c.Adoptions) != 1 || len(c.Skills) != 2 || c.Skills[0].Change != "changed" ||
		c.Skills[1].Change != "added" || c.Adoptions[0].Ref != "request:"+itoa(adopt.RequestID) {
		t.Errorf("changes %+v", c)
	}
	again, err := s.WorkItemByID(ctx, items[0].ID)
	if err != nil || again.State != ItemClosed || again.Assessment == nil || again.Assessment.By.Session != "a" ||
		len(again.Assessment.Changes.Adoptions) != 1 {
		t.Errorf("read back %+v, %v", again, err)
	}
	err = s.Update(ctx, func(tx *Tx) error {
		_, err := tx.AssessWorkItem(items[0].ID, "no-change", by, nil)
		return err
	})
	if !errors.Is(err, ErrClosedItem) {
		t.Errorf("assessing again: %v; want ErrClosedItem", err)
	}
	err = s.Update(ctx, func(tx *Tx) error {
		_, err := tx.AssessWorkItem(999, "no-change", by, nil)
		return err
	})
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("assessing no item: %v; want ErrNotFound", err)
	}
	// One closed, so one more opens.
	it := WorkItem{Purpose: "p", Reason: "r", EvidenceRefs: []string{}, Origin: by}
	if err := s.Update(ctx, func(tx *Tx) error { return tx.OpenWorkItem(&it, max) }); err != nil {
		t.Errorf("after an assessment: %v", err)
	}
	if all, err := s.WorkItems(ctx, ""); len(all) != max+1 || err != nil {
		t.Errorf("%d items, %v", len(all), err)
	}
	if got, want := changes(t, s, sess.ID), "work_item work_item work_item work_item.assessed work_item"; got != want {
		t.Errorf("the session's journal: %s; want %s", got, want)
	}
}

// changes are the kinds of session's journal entries of self-maintenance, in order,
// each with its record loaded and of its kind's type.
func changes(t *testing.T, s *Store, session int64) string {
	t.Helper()
	log, err := s.Log(context.Background(), LogFilter{Session: session})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range log {
		var ok bool
		switch e.Kind {
		case KindWorkItem, KindWorkItemAssessed:
			_, ok = e.Record.(WorkItem)
		case KindCandidate:
			_, ok = e.Record.(Candidate)
		case KindAdoption:
			_, ok = e.Record.(Adoption)
		case KindFrontier, KindFrontierInstalled:
			_, ok = e.Record.(FrontierSelection)
		default:
			continue
		}
		if !ok {
			t.Errorf("entry %d, %s, holds a %T", e.Seq, e.Kind, e.Record)
		}
		kinds = append(kinds, e.Kind)
	}
	return strings.Join(kinds, " ")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func stage(t *testing.T, s *Store, by Actor, id string, scope Scope, text string) (Candidate, bool, error) {
	t.Helper()
	c := Candidate{CandidateID: id, Target: "orientation", Scope: scope, Text: text, Digest: "d-" + text, StagedBy: by}
	var existed bool
	err := s.Update(context.Background(), func(tx *Tx) error {
		var err error
		existed, err = tx.StageCandidate(&c, 4)
		return err
	})
	return c, existed, err
}

func adopt(s *Store, by Actor, candidate, op string) (Adoption, bool, error) {
	var a Adoption
	var replayed bool
	err := s.Update(context.Background(), func(tx *Tx) error {
		var err error
		a, replayed, err = tx.AdoptCandidate(candidate, op, by)
		return err
	})
	return a, replayed, err
}

func TestOrientationAdoptsOnceByOperationAndOnlyOnItsBase(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	a, _ := s.CreateSession(ctx, "a")
	b, _ := s.CreateSession(ctx, "b")
	byA, byB := request(t, s, a, "orientation.stage"), request(t, s, b, "orientation.stage")
	if _, _, err := stage(t, s, byA, "one", GlobalScope, "first"); err != nil {
		t.Fatal(err)
	}
	if _, existed, err := stage(t, s, byB, "one", GlobalScope, "first"); !existed || err != nil {
		t.Errorf("staged again the same: existed %v, %v", existed, err)
	}
	if _, _, err := stage(t, s, byA, "one", GlobalScope, "other"); !errors.Is(err, ErrCandidateExists) {
		t.Errorf("staged again otherwise: %v; want ErrCandidateExists", err)
	}
	if _, _, err := stage(t, s, byB, "two", GlobalScope, "second"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stage(t, s, byB, "mine", SessionScope(b), "b's own"); err != nil {
		t.Fatal(err)
	}
	first, replayed, err := adopt(s, byA, "one", "op-1")
	if err != nil || replayed || first.Previous != 0 || first.Scope.Kind != ScopeGlobal {
		t.Fatalf("%+v %v %v", first, replayed, err)
	}
	if again, replayed, err := adopt(s, byA, "one", "op-1"); err != nil || !replayed || again.ID != first.ID {
		t.Errorf("retried: %+v %v %v; want adoption %d replayed", again, replayed, err, first.ID)
	}
	if _, _, err := adopt(s, byA, "two", "op-1"); !errors.Is(err, ErrOperationReused) {
		t.Errorf("op-1 for another candidate: %v; want ErrOperationReused", err)
	}
	if _, _, err := adopt(s, byB, "two", "op-2"); !errors.Is(err, ErrConflict) {
		t.Errorf("two, staged on no adoption: %v; want ErrConflict", err)
	}
	if _, _, err := adopt(s, byA, "one", "op-3"); !errors.Is(err, ErrConflict) {
		t.Errorf("one again, by another operation: %v; want ErrConflict", err)
	}
	if _, _, err := adopt(s, byA, "nope", "op-4"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown candidate: %v; want ErrNotFound", err)
	}
	if _, _, err := adopt(s, byA, "mine", "op-5"); !errors.Is(err, ErrOtherScope) {
		t.Errorf("b's candidate by a: %v; want ErrOtherScope", err)
	}
	if _, _, err := adopt(s, byB, "mine", "op-6"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		session int64
		want    string
	}{{a.ID, "first"}, {b.ID, "b's own"}} {
		got, found, err := s.SessionOrientation(ctx, tc.session, "orientation")
		if !found || err != nil || got.Text != tc.want {
			t.Errorf("session %d runs under %q (%v, %v); want %q", tc.session, got.Text, found, err, tc.want)
		}
	}
	if _, found, err := s.CurrentAdoption(ctx, a.ID, "orientation"); found || err != nil {
		t.Errorf("a's own scope has one: %v %v", found, err)
	}
	// A later candidate is staged on the current adoption, and wins.
	if c, _, err := stage(t, s, byB, "three", GlobalScope, "third"); err != nil || c.Base != first.ID {
		t.Fatalf("%+v %v; want base %d", c, err, first.ID)
	}
	if third, _, err := adopt(s, byB, "three", "op-7"); err != nil || third.Previous != first.ID {
		t.Errorf("%+v %v", third, err)
	}
	if hist, err := s.Adoptions(ctx); len(hist) != 3 || err != nil {
		t.Errorf("%d adoptions, %v; want 3", len(hist), err)
	}
	// Each change is journaled once, in the session that made it; a replay is none.
	for _, tc := range []struct {
		session int64
		want    string
	}{
		{a.ID, "orientation.candidate orientation.adoption"},
		{b.ID, "orientation.candidate orientation.candidate orientation.adoption orientation.candidate orientation.adoption"},
	} {
		if got := changes(t, s, tc.session); got != tc.want {
			t.Errorf("session %d's journal: %s; want %s", tc.session, got, tc.want)
		}
	}
}

// Bound: past the pending candidates' bound, staging is refused.
func TestStagedCandidatesAreBounded(t *testing.T) {
	s := openTemp(t)
	a, _ := s.CreateSession(context.Background(), "a")
	by := request(t, s, a, "orientation.stage")
	for i := range 5 {
		_, _, err := stage(t, s, by, "c"+itoa(int64(i)), GlobalScope, itoa(int64(i)))
		if i < 4 && err != nil || i == 4 && !errors.Is(err, ErrOverLimit) {
			t.Fatalf("candidate %d: %v", i+1, err)
		}
	}
}

// Candidates staged on one base and adopted at once: exactly one wins.
func TestRacingAdoptionsHaveOneWinner(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	a, _ := s.CreateSession(ctx, "a")
	by := request(t, s, a, "orientation.stage")
	const n = 4
	for i := range n {
		if _, _, err := stage(t, s, by, "c"+itoa(int64(i)), GlobalScope, itoa(int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = adopt(s, by, "c"+itoa(int64(i)), "op-"+itoa(int64(i)))
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrConflict):
			t.Errorf("%v; want ErrConflict", err)
		}
	}
	if won != 1 {
		t.Errorf("%d adoptions won; want 1", won)
	}
}

func TestFrontierSelectionIsPendingUntilInstalled(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	a, _ := s.CreateSession(ctx, "a")
	by := request(t, s, a, "frontier.select")
	sel := func() (FrontierSelection, bool) {
		f := FrontierSelection{SessionID: a.ID, ExecutionID: "c-1", RequestID: by.RequestID, CoversThrough: "request:" + itoa(by.RequestID)}
		var existed bool
		if err := s.Update(ctx, func(tx *Tx) error {
			var err error
			existed, err = tx.SelectFrontier(&f)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return f, existed
	}
	first, existed := sel()
	if existed {
		t.Fatal("a first selection existed")
	}
	if again, existed := sel(); !existed || again.ID != first.ID {
		t.Errorf("second: %+v %v; want the first", again, existed)
	}
	if p, found, err := s.PendingFrontier(ctx, a.ID); !found || err != nil || p.ID != first.ID {
		t.Errorf("pending %+v %v %v", p, found, err)
	}
	if err := s.InstallFrontier(ctx, a.ID, 7); err != nil {
		t.Fatal(err)
	}
	if _, found, err := s.PendingFrontier(ctx, a.ID); found || err != nil {
		t.Errorf("still pending: %v %v", found, err)
	}
	if next, existed := sel(); existed || next.ID == first.ID {
		t.Errorf("after the fold: %+v %v; want a new one", next, existed)
	}
	if got, want := changes(t, s, a.ID), "frontier frontier.installed frontier"; got != want {
		t.Errorf("the session's journal: %s; want %s", got, want)
	}
}
