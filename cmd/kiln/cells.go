package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/journal"
)

// loggedCell is a cell as kiln log --json prints it: the record kiln exec --json
// printed for it, and what only the log keeps.
type loggedCell struct {
	kiln.Record
	// ExecutionID is the cell's execution id, <session>:c-N, as the daemon names it.
	ExecutionID string     `json:"execution_id"`
	Code        string     `json:"code"`
	CodeSHA256  string     `json:"code_sha256"`
	EndedAt     *time.Time `json:"ended_at"` // null while it runs
	// ReportedStatus is the worker's status when the host recorded another.
	ReportedStatus *string `json:"reported_status,omitempty"`
}

// cellOfLog is the cell c of session, as kiln log --json prints it.
func cellOfLog(session string, c journal.LogCell) (loggedCell, error) {
	out, err := c.Outputs()
	if err != nil {
		return loggedCell{}, err
	}
	raised, err := c.Raised()
	if err != nil {
		return loggedCell{}, err
	}
	var raw struct {
		Stdout *kiln.RawTail `json:"stdout"`
		Stderr *kiln.RawTail `json:"stderr"`
	}
	if len(c.Raw) > 0 {
		if err := json.Unmarshal(c.Raw, &raw); err != nil {
			return loggedCell{}, fmt.Errorf("the raw output of %s: %w", c.CellID, err)
		}
	}
	rec := kiln.Record{Session: session, ID: c.CellID, Generation: c.Generation, Status: c.Status,
		StartedAt: c.StartedAt.UTC(), Output: out, TruncatedBytes: c.TruncatedBytes, Error: c.Error,
		Exception: raised, RawStdout: raw.Stdout, RawStderr: raw.Stderr, NamespaceLost: c.NamespaceLost, NotRun: c.NotRun,
		Limit: c.Limit}
	if c.EndedAt != nil {
		rec.DurationMs = max(c.EndedAt.UnixMilli()-c.StartedAt.UnixMilli(), 0)
	}
	return loggedCell{Record: rec, ExecutionID: session + ":" + c.CellID, Code: c.Code, CodeSHA256: c.CodeSHA256, EndedAt: c.EndedAt, ReportedStatus: c.ReportedStatus}, nil
}

// entryOfLog is e as kiln log --json prints it: a cell's entry has the cell's record,
// and every record that names a cell names it by its execution id, <session>:c-N.
func entryOfLog(e journal.LogEntry) (journal.LogEntry, error) {
	switch r := e.Record.(type) {
	case journal.LogCell:
		cell, err := cellOfLog(e.Session, r)
		if err != nil {
			return e, err
		}
		e.Record = cell
	case journal.LogOutput:
		r.CellID = e.Session + ":" + r.CellID
		e.Record = r
	case journal.LogRequest:
		if strings.HasPrefix(r.ExecutionID, "c-") { // a program's calls keep its run's id
			r.ExecutionID = e.Session + ":" + r.ExecutionID
		}
		e.Record = r
	case journal.LogWait:
		r.ExecutionID = e.Session + ":" + r.ExecutionID
		e.Record = r
	}
	return e, nil
}

// eventOfChat is a daemon's event as kiln chat --json prints it: the entry as the
// daemon sent it, a cell's with the record kiln exec --json prints.
func eventOfChat(e client.Event) (any, error) {
	if e.Kind != string(journal.EntryCellStart) && e.Kind != string(journal.EntryCellEnd) {
		return e.Raw, nil
	}
	var sent struct {
		journal.LogEntry
		Record journal.LogCell `json:"record"`
	}
	if err := json.Unmarshal(e.Raw, &sent, json.RejectUnknownMembers(false)); err != nil {
		return nil, fmt.Errorf("the daemon's event %d: %w", e.Seq, err)
	}
	sent.Record.CellID = strings.TrimPrefix(sent.Record.CellID, sent.Session+":") // the daemon's execution id
	sent.LogEntry.Record = sent.Record
	return entryOfLog(sent.LogEntry)
}
