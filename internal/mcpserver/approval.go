package mcpserver

import (
	"context"

	"github.com/kilnrt/kiln/internal/approval"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DecisionInput approves or rejects a cell the session's agent wrote, held for the
// operator's decision before it runs.
type DecisionInput struct {
	ExecutionID string `json:"execution_id" jsonschema:"the held cell, <session>:c-N, as held lists it"`
	Reason      string `json:"reason,omitempty" jsonschema:"why; the model reads a rejection's reason as the cell's result"`
}

// HeldInput names the session whose held cells to list.
type HeldInput struct {
	Session string `json:"session" jsonschema:"the session's id"`
}

// HeldList is the cells of a session's agent held for a decision now, oldest first.
type HeldList struct {
	Held []approval.Review `json:"held"`
}

func (s *handlers) approve(ctx context.Context, _ *mcp.CallToolRequest, in DecisionInput) (*mcp.CallToolResult, approval.Decision, error) {
	return s.decide(ctx, in, true)
}

func (s *handlers) reject(ctx context.Context, _ *mcp.CallToolRequest, in DecisionInput) (*mcp.CallToolResult, approval.Decision, error) {
	return s.decide(ctx, in, false)
}

// decide records the decision about a held cell: approved, it runs; rejected, it never
// does. A cell not held now is an error saying so.
func (s *handlers) decide(ctx context.Context, in DecisionInput, approve bool) (*mcp.CallToolResult, approval.Decision, error) {
	sess, x, err := s.execution(ctx, in.ExecutionID)
	if err != nil {
		return nil, approval.Decision{}, err
	}
	d, err := sess.Decide(ctx, x.Cell(), approve, in.Reason)
	return nil, d, err
}

func (s *handlers) held(ctx context.Context, _ *mcp.CallToolRequest, in HeldInput) (*mcp.CallToolResult, HeldList, error) {
	sess, err := s.d.Session(in.Session)
	if err != nil {
		return nil, HeldList{}, err
	}
	held, err := sess.Held(ctx)
	if err != nil {
		return nil, HeldList{}, err
	}
	if held == nil {
		held = []approval.Review{}
	}
	return nil, HeldList{Held: held}, nil
}
