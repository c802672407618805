package route

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// MaxScriptReplies bounds the replies of one script file.
const MaxScriptReplies = 100000

// ScriptReply is one line of a script route's JSONL file: the model's code (a call of
// the python tool), its text, or both; the usage object the route reports, exactly as
// a provider would send it (absent: no usage reported); and for a failed call, its error.
// Hold makes the call wait until it is cancelled, as a model that never answers.
type ScriptReply struct {
	Code       *string        `json:"code,omitzero"`
	Text       string         `json:"text,omitzero"`
	Usage      jsontext.Value `json:"usage,omitzero"`
	StopReason string         `json:"stop_reason,omitzero"`
	Error      string         `json:"error,omitzero"`
	Hold       bool           `json:"hold,omitzero"`
}

// Script is a script route: it serves its replies in order, one a call, and fails a call
// past the last with ErrScriptExhausted.
type Script struct {
	replies []ScriptReply
	mu      sync.Mutex
	next    int
}

// OpenScript reads a script route's JSONL file: one ScriptReply a line, blank lines
// skipped, an unknown member an error naming its line.
func OpenScript(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("route: script: %w", err)
	}
	replies, err := ParseScript(data)
	if err != nil {
		return nil, fmt.Errorf("route: script %s: %w", path, err)
	}
	return &Script{replies: replies}, nil
}

// NewScript is a script route serving replies.
func NewScript(replies []ScriptReply) *Script { return &Script{replies: replies} }

// ParseScript reads the lines of a script file.
func ParseScript(data []byte) ([]ScriptReply, error) {
	var out []ScriptReply
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, MaxResponseBytes)
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		if len(out) == MaxScriptReplies {
			return nil, fmt.Errorf("line %d: over %d replies", line, MaxScriptReplies)
		}
		var r ScriptReply
		if err := json.Unmarshal(text, &r, json.RejectUnknownMembers(true)); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Seek makes the next call get reply n (from 0): a session that made n calls of the
// script before a restart goes on where it was.
func (s *Script) Seek(n int) {
	s.mu.Lock()
	s.next = max(n, 0)
	s.mu.Unlock()
}

// Served is how many calls the script has answered or failed.
func (s *Script) Served() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next
}

// Call serves the next reply.
func (s *Script) Call(ctx context.Context, req Request) (Reply, error) {
	s.mu.Lock()
	n := s.next
	if n < len(s.replies) {
		s.next++
	}
	s.mu.Unlock()
	if n >= len(s.replies) {
		err := fmt.Errorf("%w: it has %d replies and this is call %d", ErrScriptExhausted, len(s.replies), n+1)
		return Reply{}, &CallError{Failures: []Failure{{Error: err.Error()}}, Err: err}
	}
	r := s.replies[n]
	if r.Hold {
		<-ctx.Done()
		return Reply{}, &CallError{Failures: []Failure{{Error: ctx.Err().Error()}}, Err: ctx.Err()}
	}
	if r.Error != "" {
		err := errors.New("route: script: " + r.Error)
		if tooLong(err) {
			err = fmt.Errorf("%w: %w", ErrContextLength, err)
		}
		return Reply{}, &CallError{Failures: []Failure{{Error: err.Error()}}, Err: err}
	}
	reply := Reply{Text: r.Text, StopReason: r.StopReason, Model: "script"}
	req.delta(DeltaText, r.Text) // a script's reply streams as one piece of each kind
	if r.Code != nil && !req.TextOnly {
		args, _ := json.Marshal(codeArgs{Code: r.Code})
		req.delta(DeltaArguments, string(args))
		reply.Call = &Call{ID: fmt.Sprintf("call_%d", n+1), Arguments: string(args), Code: *r.Code}
	}
	reply.Usage, reply.RawUsage, reply.UsageProblem = readUsage(r.Usage)
	return reply.valid(), nil
}
