package mcpserver

import (
	"context"
	"fmt"
	"time"

	"github.com/kilnrt/kiln/internal/live"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DeltasInput asks for the pieces of the agents' model calls published after a cursor.
type DeltasInput struct {
	Session string `json:"session,omitempty" jsonschema:"the session whose agent's pieces to read; empty: every session's"`
	Cursor  string `json:"cursor,omitempty" jsonschema:"the cursor the last model_deltas answered; empty: from now"`
	WaitMS  *int64 `json:"wait_ms,omitempty" jsonschema:"how long to wait for a piece, 0..50000 ms; default 10000"`
}

// Deltas are the pieces read and the cursor after them, for the next call.
type Deltas struct {
	Deltas []live.Delta `json:"deltas"`
	Cursor string       `json:"cursor"`
}

// deltas answers the pieces of the model calls published after the cursor, waiting up
// to wait_ms for the first; none, with the cursor, when none came. A call without a
// cursor starts from now: pieces are not records, and none is replayed.
func (s *handlers) deltas(ctx context.Context, _ *mcp.CallToolRequest, in DeltasInput) (*mcp.CallToolResult, Deltas, error) {
	wait, err := waitOf(in.WaitMS)
	if err != nil {
		return nil, Deltas{}, err
	}
	pieces := live.AllSessions
	if in.Session != "" {
		sess, err := s.d.Session(in.Session)
		if err != nil {
			return nil, Deltas{}, err
		}
		if pieces, err = sess.RecordID(ctx); err != nil {
			return nil, Deltas{}, err
		}
	}
	hub := s.d.Live()
	var cursor live.Cursor
	if in.Cursor == "" {
		cursor, _ = hub.Follow(pieces)
	} else if cursor, err = live.ParseCursor(in.Cursor); err != nil {
		return nil, Deltas{}, fmt.Errorf("mcpserver: %w", err)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		got, next, changed := hub.Read(pieces, cursor)
		if len(got) > 0 {
			return nil, Deltas{Deltas: got, Cursor: next.String()}, nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil, Deltas{Deltas: []live.Delta{}, Cursor: next.String()}, nil
		case <-ctx.Done():
			return nil, Deltas{}, ctx.Err()
		}
		cursor = next
	}
}
