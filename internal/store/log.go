package store

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"time"
)

// Entry is one journal entry with the record it names, as of now.
type Entry struct {
	Seq       int64     `json:"seq"`
	At        time.Time `json:"at"`
	SessionID int64     `json:"-"`
	Session   string    `json:"session"`
	Kind      string    `json:"kind"`
	Ref       int64     `json:"ref"`
	// Record is the record: a Session, KernelReset, Execution, Event, RequestRecord,
	// Effect, Wait, PromptRecord, AgentRecord, OutputChunk, ProgramRun, WorkItem,
	// Candidate, Adoption, FrontierSelection or PeerRecord.
	Record any `json:"record"`
}

// RequestRecord is a request with its reply, nil while unanswered.
type RequestRecord struct {
	Request
	Reply *Reply `json:"reply"`
}

// LogFilter selects journal entries.
type LogFilter struct {
	Session int64 // 0 for every session
	Since   int64 // entries after this sequence number
	Limit   int   // at most this many; 0 means no limit
	// Bytes, if above 0, ends the entries after the one whose record brings the text
	// they hold to this many bytes: a bound on what one call loads, where a cell's
	// record alone may hold megabytes. The first entry always comes.
	Bytes int
}

// Log returns the journal entries filter selects, in order, each with its record.
func (s *Store) Log(ctx context.Context, filter LogFilter) ([]Entry, error) {
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
	limit := int64(math.MaxInt64)
	if filter.Limit > 0 {
		limit = int64(filter.Limit)
	}
	// Two queries, not one that takes a session of 0 for every session: a session's
	// entries are read through its index (journal_by_session), from its first entry after
	// Since on.
	query, args := logAllQuery, []any{filter.Since, limit}
	if filter.Session != 0 {
		query, args = s.eng.Dialect().JournalOfSession, []any{filter.Session, filter.Since, limit}
	}
	rows, err := s.readRows(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: log: %w", err)
	}
	var entries []Entry
	for rows.Next() {
		var e Entry
		var at int64
		if err := rows.Scan(&e.Seq, &at, &e.SessionID, &e.Session, &e.Kind, &e.Ref); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: log: %w", err)
		}
		e.At = time.UnixMilli(at)
		entries = append(entries, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: log: %w", err)
	}
	held := 0
	for i := range entries {
		rec, err := s.record(ctx, entries[i].SessionID, entries[i].Kind, entries[i].Ref)
		if err != nil {
			return nil, err
		}
		entries[i].Record = rec
		if held += textBytes(reflect.ValueOf(rec)); filter.Bytes > 0 && held >= filter.Bytes {
			return entries[:i+1], nil
		}
	}
	return entries, nil
}

// logAllQuery selects the journal's entries after a sequence number, of every session.
const logAllQuery = `SELECT j.seq, j.at_ms, j.session_id, s.name, j.kind, j.ref_id
	FROM journal j JOIN sessions s ON s.id = j.session_id
	WHERE j.seq > $1 ORDER BY j.seq LIMIT $2`

// textBytes is about how much text v holds: the lengths of its strings and byte
// slices, through structs, pointers, interfaces, slices and maps.
func textBytes(v reflect.Value) int {
	switch v.Kind() {
	case reflect.String:
		return v.Len()
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return 0
		}
		return textBytes(v.Elem())
	case reflect.Struct:
		n := 0
		for i := range v.NumField() {
			n += textBytes(v.Field(i))
		}
		return n
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return v.Len()
		}
		n := 0
		for i := range v.Len() {
			n += textBytes(v.Index(i))
		}
		return n
	case reflect.Map:
		n := 0
		for it := v.MapRange(); it.Next(); {
			n += textBytes(it.Key()) + textBytes(it.Value())
		}
		return n
	}
	return 0
}

// record loads the record a journal entry names.
func (s *Store) record(ctx context.Context, session int64, kind string, ref int64) (any, error) {
	switch kind {
	case KindSession:
		var sess Session
		var at int64
		err := s.readRow(ctx, `SELECT id, name, created_at_ms FROM sessions WHERE id = $1`, ref).Scan(&sess.ID, &sess.Name, &at)
		sess.CreatedAt = time.UnixMilli(at)
		return sess, err
	case KindKernelReset, KindKernelEnd:
		return s.KernelResetByID(ctx, session, ref)
	case KindExecution, KindExecutionEnd:
		return s.ExecutionByID(ctx, session, ref)
	case KindEvent:
		return s.EventByID(ctx, session, ref)
	case KindRequest, KindReply:
		req, reply, err := s.RequestByID(ctx, session, ref)
		return RequestRecord{Request: req, Reply: reply}, err
	case KindEffect, KindReceipt:
		return s.EffectByID(ctx, session, ref)
	case KindWait, KindWaitEnd:
		return s.WaitByID(ctx, session, ref)
	case KindPromptHeader, KindPromptChange:
		return s.PromptRecordByID(ctx, session, ref)
	case KindTurnStart, KindTurnEnd, KindModelCall, KindFold, KindReview, KindDecision:
		return s.AgentRecordByID(ctx, session, ref)
	case KindOutput:
		return s.OutputChunkByID(ctx, session, ref)
	case KindProgram, KindProgramEnd:
		return s.ProgramByID(ctx, session, ref)
	case KindWorkItem, KindWorkItemAssessed:
		return s.WorkItemByID(ctx, ref)
	case KindCandidate:
		return s.CandidateByID(ctx, ref)
	case KindAdoption:
		return s.AdoptionByID(ctx, ref)
	case KindFrontier, KindFrontierInstalled:
		return s.FrontierByID(ctx, ref)
	case KindPeerOpened, KindPeerRequest, KindPeerResult, KindPeerStopped:
		return s.PeerRecordByID(ctx, session, ref)
	}
	return nil, fmt.Errorf("store: journal entry of unknown kind %q", kind)
}
