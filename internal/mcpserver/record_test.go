package mcpserver_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/poll"
)

// summary is what the test reads of an execution a tool answers: the members it shares
// with a cell's record.
type summary struct {
	ExecutionID string    `json:"execution_id"`
	Session     string    `json:"session"`
	ID          string    `json:"id"`
	Status      string    `json:"status"`
	Generation  string    `json:"generation"`
	StartedAt   time.Time `json:"started_at"`
	DurationMs  *int64    `json:"duration_ms"`
	Exception   *struct {
		Type      string `json:"type"`
		Value     string `json:"value"`
		Traceback string `json:"traceback"`
	} `json:"exception"`
	NamespaceLost bool `json:"namespace_lost"`
}

// TestExecutionCarriesTheRecordsMembers runs cells through a go-sdk client: execute's
// answer, running and then ended, has the record's started_at and duration_ms (as the
// record tool's started_at and ended_at make it), its cell id, and what a failed cell
// raised.
func TestExecutionCarriesTheRecordsMembers(t *testing.T) {
	if _, err := os.Stat("/usr/bin/env"); err != nil {
		t.Skip(err)
	}
	// The FIFO is in the workspace, which a confined cell sees as the test does.
	ws := t.TempDir()
	cs := connect(t, ws)
	callTool(t, cs, "session_open", map[string]any{"session": "s"}, nil)
	fifo := filepath.Join(ws, "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	var running summary
	callTool(t, cs, "execute", map[string]any{"session": "s", "code": "open(" + quote(fifo) + ").read()\n1", "wait_ms": 0}, &running)
	if running.Status != "running" || running.ID != "c-1" || running.Session != "s" || running.StartedAt.IsZero() || running.DurationMs != nil {
		t.Fatalf("a running cell: %+v; want running c-1 with started_at and duration_ms null", running)
	}
	// It opens once the cell has opened it to read.
	poll.Until(t, time.Minute, func() bool {
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			f.Close()
		}
		return err == nil
	})
	var ended summary
	callTool(t, cs, "wait", map[string]any{"execution_id": running.ExecutionID, "wait_ms": 50000}, &ended)
	var rec struct {
		Record struct {
			StartedAt time.Time `json:"started_at"`
			EndedAt   time.Time `json:"ended_at"`
		} `json:"record"`
	}
	callTool(t, cs, "record", map[string]any{"execution_id": running.ExecutionID}, &rec)
	want := rec.Record.EndedAt.UnixMilli() - rec.Record.StartedAt.UnixMilli()
	if ended.Status != "ok" || ended.ID != "c-1" || !ended.StartedAt.Equal(rec.Record.StartedAt) ||
		!running.StartedAt.Equal(ended.StartedAt) || ended.DurationMs == nil || *ended.DurationMs != want || ended.Exception != nil {
		t.Fatalf("the cell once ended: %+v (duration %v); want ok, started at %s, %d ms, no exception",
			ended, ended.DurationMs, rec.Record.StartedAt, want)
	}

	var failed summary
	callTool(t, cs, "execute", map[string]any{"session": "s", "code": "raise ValueError('boom')"}, &failed)
	if e := failed.Exception; failed.Status != "error" || failed.ID != "c-2" || failed.DurationMs == nil || e == nil ||
		e.Type != "ValueError" || e.Value != "boom" || !strings.Contains(e.Traceback, "ValueError: boom") {
		t.Fatalf("a failed cell: %+v, exception %+v", failed, failed.Exception)
	}
}

// quote is s as a Python string literal.
func quote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}
