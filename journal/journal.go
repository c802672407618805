// Package journal reads a data directory's durable record without a workbench: its
// sessions, its log entries, a session's transcript, and its agent's turns and usage.
package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/datadir"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
)

// Errors a caller tells apart with errors.Is.
var (
	// ErrNoSession is a session the record does not have, asked of by a reader.
	ErrNoSession = datadir.ErrNoSession
	// ErrNoRecord is a data directory that holds no durable record yet, asked of by a
	// reader, which never makes one.
	ErrNoRecord = datadir.ErrNoRecord
)

// RecordFile is the durable record's database file in the data directory.
const RecordFile = store.FileName

// TimeLayout is how the host writes an instant: in UTC, to the second, with Z, as
// runtime.inspect answers and kiln log prints.
const TimeLayout = host.TimeLayout

// InputRef names input id as evidence does: "event:7".
func InputRef(id int64) string { return host.EventRef(id) }

// RequestRef names host request id: "request:7".
func RequestRef(id int64) string { return host.RequestRef(id) }

// EffectRef names effect id: "effect:7".
func EffectRef(id int64) string { return host.EffectRef(id) }

// WaitRef names wait id: "wait:7".
func WaitRef(id int64) string { return host.WaitRef(id) }

// Journal is a data directory's durable record opened for reading, without a
// workbench: its sessions, its log entries, and a session's transcript. Reading never
// writes: it makes no file, applies no migration, and needs no write access to the
// directory. Its methods are safe for concurrent use; each reads the record as it is
// then, so a Journal open beside a running host sees what the host commits.
type Journal struct {
	st *store.Store
}

// Open opens the durable record of dataDir ("" for admin.DefaultDataDir) for reading
// only. A directory with no record is ErrNoRecord; a record of a newer schema than
// this kiln's, or of an older one (a command that writes migrates it), is refused.
func Open(ctx context.Context, dataDir string) (*Journal, error) {
	dataDir, err := datadir.OrDefault(dataDir)
	if err != nil {
		return nil, err
	}
	st, err := datadir.OpenExisting(ctx, dataDir, true)
	if err != nil {
		return nil, err
	}
	return &Journal{st: st}, nil
}

// Close closes the journal.
func (j *Journal) Close() error { return j.st.Close() }

// Path is the database file the journal reads.
func (j *Journal) Path() string { return j.st.Path() }

// Sessions lists every session of the record, oldest first.
func (j *Journal) Sessions(ctx context.Context) ([]LogSession, error) {
	list, err := j.st.Sessions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]LogSession, len(list))
	for i, s := range list {
		out[i] = logSession(s)
	}
	return out, nil
}

// Session is the session named name, or ErrNoSession.
func (j *Journal) Session(ctx context.Context, name string) (LogSession, error) {
	s, err := j.session(ctx, name)
	return logSession(s), err
}

// session is the stored session named name, or ErrNoSession saying which and where.
func (j *Journal) session(ctx context.Context, name string) (store.Session, error) {
	return datadir.Session(ctx, j.st, name)
}

// LogFilter selects log entries.
type LogFilter struct {
	Session string // only this session's entries; "" for every session's
	Since   int64  // only entries after this sequence number
	Limit   int    // at most this many; 0 for no limit
}

// Log returns the entries filter selects, in the order they were written, each with
// its record as it is now (a cell's start entry shows how the cell ended, once it has).
// A filter naming a session the record does not have is ErrNoSession.
func (j *Journal) Log(ctx context.Context, filter LogFilter) ([]LogEntry, error) {
	f := store.LogFilter{Since: filter.Since, Limit: filter.Limit}
	if filter.Session != "" {
		s, err := j.session(ctx, filter.Session)
		if err != nil {
			return nil, err
		}
		f.Session = s.ID
	}
	entries, err := j.st.Log(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make([]LogEntry, len(entries))
	for i, e := range entries {
		rec, err := logRecord(e.Record)
		if err != nil {
			return nil, fmt.Errorf("kiln: log entry %d: %w", e.Seq, err)
		}
		out[i] = LogEntry{Seq: e.Seq, At: e.At, Session: e.Session, Kind: EntryKind(e.Kind), Ref: e.Ref, Record: rec}
	}
	return out, nil
}

// EntryKind says what a log entry records.
type EntryKind string

// The kinds of log entries. A record that lives on (a cell, a request, an effect, a
// wait, a generation) has an entry when it begins and another when it ends; both show
// the record as it is now.
const (
	EntrySession         EntryKind = "session"         // a session was created: LogSession
	EntryGenerationStart EntryKind = "kernel.reset"    // a generation started, or failed to: LogGeneration
	EntryGenerationEnd   EntryKind = "kernel.end"      // a generation ended: LogGeneration
	EntryCellStart       EntryKind = "execution"       // a cell started: LogCell
	EntryCellEnd         EntryKind = "execution.end"   // a cell ended: LogCell
	EntryOutput          EntryKind = "output"          // a piece of a running cell's output: LogOutput
	EntryInput           EntryKind = "event"           // an input arrived: LogInput
	EntryRequest         EntryKind = "request"         // a host request arrived: LogRequest
	EntryReply           EntryKind = "reply"           // a host request was answered: LogRequest
	EntryEffect          EntryKind = "effect"          // an effect began: LogEffect
	EntryReceipt         EntryKind = "receipt"         // an effect's outcome was recorded: LogEffect
	EntryWait            EntryKind = "wait"            // a wait was accepted: LogWait
	EntryWaitEnd         EntryKind = "wait.end"        // a wait was woken or superseded: LogWait
	EntryPromptHeader    EntryKind = "prompt.header"   // the transcript pinned its instruction header: LogPrompt
	EntryPromptRevision  EntryKind = "prompt.revision" // the transcript saw the instruction text change: LogPrompt
	EntryTurnStart       EntryKind = "turn.start"      // an agent's turn began: LogAgent
	EntryTurnEnd         EntryKind = "turn.end"        // an agent's turn ended: LogAgent
	EntryModelCall       EntryKind = "model_call"      // an agent made a model call: LogAgent
	EntryFold            EntryKind = "fold"            // an agent folded its conversation: LogAgent
	EntryProgramStart    EntryKind = "program"         // a program run recorded by ProgramLog started: LogProgram
	EntryProgramEnd      EntryKind = "program.end"     // a recorded program run ended: LogProgram
	// Self-maintenance (docs/maintenance.md), each in the session that made the change.
	EntryWorkItem          EntryKind = "work_item"             // a work item was opened: WorkItem
	EntryWorkItemAssessed  EntryKind = "work_item.assessed"    // a work item was assessed: WorkItem
	EntryCandidate         EntryKind = "orientation.candidate" // an orientation text was staged: Candidate
	EntryAdoption          EntryKind = "orientation.adoption"  // an orientation text was adopted: Adoption
	EntryFrontier          EntryKind = "frontier"              // a frontier was selected: FrontierSelection
	EntryFrontierInstalled EntryKind = "frontier.installed"    // a fold installed it: FrontierSelection
	// Peers (docs/peers.md), each in the parent's session and the peer's.
	EntryPeerOpened  EntryKind = "peer.opened"  // a session opened a peer: PeerRecord
	EntryPeerRequest EntryKind = "peer.request" // a parent sent its peer a request: PeerRecord
	EntryPeerResult  EntryKind = "peer.result"  // a request reached a final state: PeerRecord
	EntryPeerStopped EntryKind = "peer.stopped" // a peer stopped, or began to drain: PeerRecord
)

// PeerRecord is a record of a peer: its Kind one of the EntryPeer kinds, its Body what
// happened (docs/peers.md shows each).
type PeerRecord = store.PeerRecord

// LogEntry is one entry of the durable record, as kiln log --json prints it.
type LogEntry struct {
	Seq     int64     `json:"seq"` // its place in the record, from 1, across sessions
	At      time.Time `json:"at"`  // when it was written
	Session string    `json:"session"`
	Kind    EntryKind `json:"kind"`
	Ref     int64     `json:"ref"` // the id of its record, among records of its type
	// Record is the record the entry names, by Kind: a LogSession, LogGeneration,
	// LogCell, LogOutput, LogInput, LogRequest, LogEffect, LogWait, LogPrompt,
	// LogAgent, LogProgram, WorkItem, Candidate, Adoption, FrontierSelection or PeerRecord.
	Record any `json:"record"`
}

// LogSession is a session of the record.
type LogSession struct {
	ID        int64     `json:"id"` // the record's own number for it
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// LogGeneration is a generation of a session: one worker process, from its start (or
// its failure to start) to its end.
type LogGeneration struct {
	ID         int64          `json:"id"`
	Generation string         `json:"generation"` // g-1, g-2, …
	StartedAt  time.Time      `json:"started_at"`
	Status     string         `json:"status"` // "started" or "failed"
	Loaded     jsontext.Value `json:"loaded"` // what the worker loaded, as its hello said
	Error      *string        `json:"error"`  // why it failed to start
	EndedAt    *time.Time     `json:"ended_at,omitempty"`
	EndCause   *string        `json:"end_cause,omitempty"` // how its worker ended
}

// CellRunning is the status of a LogCell with no end recorded; an ended one has a
// Record's status.
const CellRunning kiln.CellStatus = "running"

// LogCell is a cell as the record keeps it: its source, and once it ended, how.
type LogCell struct {
	ID         int64  `json:"id"`
	Generation string `json:"generation"`
	CellID     string `json:"execution_id"` // c-1, c-2, …, as Record.ID
	CodeSHA256 string `json:"code_sha256"`  // of the whole source's exact bytes
	// Code is the source, cut at 262,144 bytes (a longer one the host refused: it never
	// ran), on a character's start where it has one; CodeBytes says how long it was. One
	// that is not UTF-8 (which the host refused) reads with U+FFFD for each bad sequence.
	Code      string `json:"code"`
	CodeBytes int64  `json:"code_bytes"`
	// Status is the host's: a Record's status, or CellRunning.
	Status kiln.CellStatus `json:"status"`
	// ReportedStatus is the worker's status when the host recorded another.
	ReportedStatus *string        `json:"reported_status,omitempty"`
	StartedAt      time.Time      `json:"started_at"`
	EndedAt        *time.Time     `json:"ended_at"`
	Output         jsontext.Value `json:"output"` // a JSON array of the output records; null while running
	TruncatedBytes int64          `json:"truncated_bytes"`
	Error          *string        `json:"error"`
	Exception      jsontext.Value `json:"exception"`     // what the cell raised, in parts; null if nothing
	Raw            jsontext.Value `json:"raw,omitempty"` // its raw output tails; absent if none
	NamespaceLost  bool           `json:"namespace_lost"`
	// NotRun says the cell never ran: the host refused it, or never handed it over.
	NotRun bool `json:"not_run,omitzero"`
	// Limit is the limit that ended the cell; "" if none did.
	Limit kiln.CellLimit `json:"limit,omitempty"`
}

// Outputs is the cell's Output decoded: its output records, nil while it runs.
func (c LogCell) Outputs() ([]kiln.Output, error) {
	var out []kiln.Output
	if len(c.Output) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(c.Output, &out); err != nil {
		return nil, fmt.Errorf("kiln: the output of %s: %w", c.CellID, err)
	}
	return out, nil
}

// Raised is the cell's Exception decoded: what it raised, nil if nothing.
func (c LogCell) Raised() (*kiln.Exception, error) {
	var e *kiln.Exception
	if len(c.Exception) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(c.Exception, &e); err != nil {
		return nil, fmt.Errorf("kiln: the exception of %s: %w", c.CellID, err)
	}
	return e, nil
}

// LogOutput is a piece of a cell's stdout or stderr as it was written.
type LogOutput struct {
	ID     int64     `json:"id"`
	CellID string    `json:"execution_id"`
	Index  int       `json:"index"` // 0 for the cell's first piece, and on
	Stream string    `json:"stream"`
	Text   string    `json:"text"`
	At     time.Time `json:"at"`
}

// The sources of a LogInput.
const (
	SourceOperator = "operator" // the operator lane: kiln send, Workbench.Input
	SourceAgent    = "agent"    // the agent's own speech on the operator lane: a confirmed local.send
)

// LogInput is an input that arrived for a session, with the attention.plan decision
// made for it.
type LogInput struct {
	ID         int64          `json:"id"` // InputRef names it
	Source     string         `json:"source"`
	ReceivedAt time.Time      `json:"received_at"`
	Payload    jsontext.Value `json:"payload"` // as it arrived: {"text": …} from an operator
	// Attention is the attention.plan decision, absent until it is made.
	Attention jsontext.Value `json:"attention,omitempty"`
}

// LogRequest is a host request a cell made, with its reply once it was answered.
type LogRequest struct {
	ID          int64          `json:"id"` // RequestRef names it
	Generation  string         `json:"generation"`
	ExecutionID string         `json:"execution_id"` // the cell that made it
	RequestID   string         `json:"request_id"`   // the worker's name for it: r-1, …
	Method      string         `json:"method"`
	Body        jsontext.Value `json:"request"`
	ReceivedAt  time.Time      `json:"received_at"`
	Reply       *LogReply      `json:"reply"` // nil while unanswered
}

// LogReply is the reply to a host request: ok with a value, or an error.
type LogReply struct {
	Kind      string         `json:"kind"` // "ok" or "error"
	Value     jsontext.Value `json:"value,omitempty"`
	Code      string         `json:"code,omitempty"`
	Message   string         `json:"message,omitempty"`
	RepliedAt time.Time      `json:"replied_at"`
}

// LogEffect is an effect a request had on the world (a workspace command, a send),
// committed before it began, with its receipt once its outcome is known.
type LogEffect struct {
	ID        int64          `json:"id"`      // EffectRef names it
	RequestID int64          `json:"request"` // the request that caused it
	Kind      string         `json:"kind"`
	Detail    jsontext.Value `json:"detail"`
	StartedAt time.Time      `json:"started_at"`
	Receipt   jsontext.Value `json:"receipt"` // null until the outcome is recorded
	EndedAt   *time.Time     `json:"ended_at"`
}

// The states of a LogWait.
const (
	WaitWaiting      = "waiting"       // the turn ended; the session waits for input or the deadline
	WaitInputPending = "input_pending" // input was already pending: the wait returned at once
	WaitWoken        = "woken"         // an input arrived while it waited
	WaitSuperseded   = "superseded"    // a later cell of the session began
)

// LogWait is a runtime.wait the host accepted.
type LogWait struct {
	ID          int64      `json:"id"`      // WaitRef names it
	RequestID   int64      `json:"request"` // the runtime.wait request
	ExecutionID string     `json:"execution_id"`
	Seconds     *float64   `json:"seconds"` // nil: no deadline
	Reason      string     `json:"reason"`
	CreatedAt   time.Time  `json:"created_at"`
	Deadline    *time.Time `json:"deadline"`
	State       string     `json:"state"`
	EventID     *int64     `json:"event_id"` // the input that ended it
	EndedAt     *time.Time `json:"ended_at"`
}

// LogPrompt is what the transcript recorded of the instruction text: the header it
// pinned, or a revision it observed.
type LogPrompt struct {
	ID     int64          `json:"id"`
	Type   string         `json:"type"` // "header_pin" or "header_revision"
	Digest string         `json:"digest"`
	Body   jsontext.Value `json:"body"`
	At     time.Time      `json:"at"`
}

// LogAgent is a record of a session's agent: a turn's start or end, a model call or a
// fold, its Body as the agent wrote it.
type LogAgent struct {
	ID   int64          `json:"id"`
	Kind EntryKind      `json:"kind"` // EntryTurnStart, EntryTurnEnd, EntryModelCall or EntryFold
	Turn int64          `json:"turn"`
	Body jsontext.Value `json:"body"`
	At   time.Time      `json:"at"`
}

// ProgramRunning is the status of a LogProgram with no end recorded: the run goes on,
// or its host ended before it did and no OpenProgramLog of its session has run since.
const ProgramRunning kiln.RunStatus = "running"

// LogProgram is a program run as ProgramLog records it: its source, and once it ended,
// how. Its tool calls are LogRequests whose ExecutionID is its RunID, with no
// Generation.
type LogProgram struct {
	ID         int64  `json:"id"`
	RunID      string `json:"run_id"`      // p-1, p-2, … in its session
	CodeSHA256 string `json:"code_sha256"` // of the whole source's exact bytes
	// Code is the source, cut at 262,144 bytes (CodeBytes says how long it was); one
	// that is not UTF-8 reads with U+FFFD for each bad sequence.
	Code      string     `json:"code"`
	CodeBytes int64      `json:"code_bytes"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"`
	// Status is the Result's status, ProgramNotRun, ProgramFailed, or ProgramRunning.
	Status kiln.RunStatus `json:"status"`
	Error  *string        `json:"error"` // the Result's error, or why it did not run
	// RefusedCalls counts the tool calls refused without being recorded: past
	// MaxProgramToolCalls, or too large to record.
	RefusedCalls int64 `json:"refused_calls"`
}

// logRecord is the public form of a stored journal record.
func logRecord(rec any) (any, error) {
	switch r := rec.(type) {
	case store.Session:
		return logSession(r), nil
	case store.KernelReset:
		return LogGeneration{ID: r.ID, Generation: r.Generation, StartedAt: r.StartedAt, Status: r.Status,
			Loaded: r.Loaded, Error: r.Error, EndedAt: r.EndedAt, EndCause: r.EndCause}, nil
	case store.Execution:
		return logCell(r), nil
	case store.OutputChunk:
		return LogOutput{ID: r.ID, CellID: r.CellID, Index: r.Index, Stream: r.Stream, Text: r.Text, At: r.At}, nil
	case store.Event:
		return logInput(r), nil
	case store.RequestRecord:
		req := LogRequest{ID: r.ID, Generation: r.Generation, ExecutionID: r.ExecutionID, RequestID: r.RequestID,
			Method: r.Method, Body: r.Body, ReceivedAt: r.ReceivedAt}
		if p := r.Reply; p != nil {
			req.Reply = &LogReply{Kind: p.Kind, Value: p.Value, Code: p.Code, Message: p.Message, RepliedAt: p.RepliedAt}
		}
		return req, nil
	case store.Effect:
		return LogEffect{ID: r.ID, RequestID: r.RequestID, Kind: r.Kind, Detail: r.Detail, StartedAt: r.StartedAt,
			Receipt: r.Receipt, EndedAt: r.EndedAt}, nil
	case store.Wait:
		return LogWait{ID: r.ID, RequestID: r.RequestID, ExecutionID: r.ExecutionID, Seconds: r.Seconds, Reason: r.Reason,
			CreatedAt: r.CreatedAt, Deadline: r.Deadline, State: r.State, EventID: r.EventID, EndedAt: r.EndedAt}, nil
	case store.PromptRecord:
		return LogPrompt{ID: r.ID, Type: r.Type, Digest: r.Digest, Body: r.Body, At: r.At}, nil
	case store.AgentRecord:
		return LogAgent{ID: r.ID, Kind: EntryKind(r.Kind), Turn: r.Turn, Body: r.Body, At: r.At}, nil
	case store.ProgramRun:
		p := LogProgram{ID: r.ID, RunID: r.RunID, CodeSHA256: r.CodeSHA256, Code: r.Code, CodeBytes: r.CodeBytes,
			StartedAt: r.StartedAt, EndedAt: r.EndedAt, Status: ProgramRunning, Error: r.Error, RefusedCalls: r.RefusedCalls}
		if r.Status != nil {
			p.Status = kiln.RunStatus(*r.Status)
		}
		return p, nil
	case store.WorkItem, store.Candidate, store.Adoption, store.FrontierSelection, store.PeerRecord:
		return r, nil
	}
	return nil, fmt.Errorf("a record of type %T", rec)
}

func logSession(s store.Session) LogSession {
	return LogSession{ID: s.ID, Name: s.Name, CreatedAt: s.CreatedAt}
}

func logCell(e store.Execution) LogCell {
	return LogCell{ID: e.ID, Generation: e.Generation, CellID: e.CellID, CodeSHA256: e.CodeSHA256, Code: e.Code,
		CodeBytes: e.CodeBytes, Status: kiln.CellStatus(e.Status), ReportedStatus: e.ReportedStatus, StartedAt: e.StartedAt,
		EndedAt: e.EndedAt, Output: e.Output, TruncatedBytes: e.TruncatedBytes, Error: e.Error, Exception: e.Exception, Raw: e.Raw,
		NamespaceLost: e.NamespaceLost, NotRun: e.NotRun, Limit: kiln.CellLimit(e.Limit)}
}

func logInput(e store.Event) LogInput {
	return LogInput{ID: e.ID, Source: e.Source, ReceivedAt: e.ReceivedAt, Payload: e.Payload, Attention: e.Attention}
}
