package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/store"
)

// Journal keeps a session's agent records in the durable record.
type Journal struct {
	Store   *store.Store
	Session int64 // the store's id of the session
}

// Record appends rec.
func (j Journal) Record(ctx context.Context, rec Record) error {
	_, err := j.Store.AppendAgentRecord(ctx, j.Session, rec.Kind(), rec.TurnID(), rec)
	return err
}

// Recover is run as a host starts, before any turn: every turn the record shows begun
// and not ended ends host_died, exactly once, and Recover returns how many turns the
// session has run.
func (j Journal) Recover(ctx context.Context, now time.Time) (turns int64, died []int64, err error) {
	recs, err := j.Store.AgentRecords(ctx, j.Session)
	if err != nil {
		return 0, nil, err
	}
	open := map[int64]bool{}
	var order []int64
	for _, r := range recs {
		turns = max(turns, r.Turn)
		switch r.Kind {
		case store.KindTurnStart:
			open[r.Turn] = true
			order = append(order, r.Turn)
		case store.KindTurnEnd:
			delete(open, r.Turn)
		}
	}
	for _, id := range order {
		if !open[id] {
			continue
		}
		end := &TurnEnd{Turn: id, EndedAt: now, EndReason: EndHostDied, Detail: "the host ended before the turn did"}
		if err := j.Record(ctx, end); err != nil {
			return 0, nil, fmt.Errorf("agent: ending turn %d: %w", id, err)
		}
		died = append(died, id)
	}
	return turns, died, nil
}

// Spent is what the session's recorded calls were charged (micro-dollars): in all, and
// in now's UTC day. A call recorded before charges were is counted at its cost.
func (j Journal) Spent(ctx context.Context, now time.Time) (session, today int64, err error) {
	recs, err := j.Store.AgentRecords(ctx, j.Session)
	if err != nil {
		return 0, 0, err
	}
	day := dayOf(now)
	for _, r := range recs {
		if r.Kind != store.KindModelCall {
			continue
		}
		var c ModelCall
		if err := json.Unmarshal(r.Body, &c); err != nil {
			return 0, 0, fmt.Errorf("agent: record %d: %w", r.ID, err)
		}
		var micros int64
		switch {
		case c.Charged != nil:
			micros = c.Charged.Micros
		case c.CostMicros != nil:
			micros = *c.CostMicros
		}
		session += micros
		if dayOf(r.At) == day {
			today += micros
		}
	}
	return session, today, nil
}

// Turns reads the session's turns from the record: each turn's start and end, with the
// model calls it made.
func (j Journal) Turns(ctx context.Context) ([]TurnSummary, error) {
	recs, err := j.Store.AgentRecords(ctx, j.Session)
	if err != nil {
		return nil, err
	}
	return Summarize(recs)
}

// TurnSummary is one turn as the record holds it.
type TurnSummary struct {
	Start *TurnStart
	End   *TurnEnd // nil while it runs
	Calls []ModelCall
	Folds []Fold
}

// TurnID is the turn's number.
func (t TurnSummary) TurnID() int64 {
	switch {
	case t.Start != nil:
		return t.Start.Turn
	case t.End != nil:
		return t.End.Turn
	}
	return 0
}

// Summarize groups agent records into turns, in order.
func Summarize(recs []store.AgentRecord) ([]TurnSummary, error) {
	var out []TurnSummary
	index := map[int64]int{}
	at := func(turn int64) *TurnSummary {
		i, ok := index[turn]
		if !ok {
			i = len(out)
			index[turn] = i
			out = append(out, TurnSummary{})
		}
		return &out[i]
	}
	for _, r := range recs {
		t := at(r.Turn)
		var err error
		switch r.Kind {
		case store.KindTurnStart:
			t.Start = new(TurnStart)
			err = json.Unmarshal(r.Body, t.Start)
		case store.KindTurnEnd:
			t.End = new(TurnEnd)
			err = json.Unmarshal(r.Body, t.End)
		case store.KindModelCall:
			var c ModelCall
			err = json.Unmarshal(r.Body, &c)
			t.Calls = append(t.Calls, c)
		case store.KindFold:
			var f Fold
			err = json.Unmarshal(r.Body, &f)
			t.Folds = append(t.Folds, f)
		}
		if err != nil {
			return nil, fmt.Errorf("agent: record %d: %w", r.ID, err)
		}
	}
	return out, nil
}
