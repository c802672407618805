// Package routetest serves scripted model replies over real HTTP on loopback, in each
// wire format a route speaks — OpenAI chat completions (streamed as SSE or whole), the
// OpenAI Responses API (SSE) and the Anthropic Messages API (SSE) — and keeps every
// request body it was sent, for tests of routes and of the agent that calls them.
package routetest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Wire formats a Server speaks.
const (
	OpenAIChat      = "openai-chat"
	OpenAIResponses = "openai-responses"
	Anthropic       = "anthropic"
)

// maxBody bounds a request body the server reads.
const maxBody = 64 << 20

// Step is one scripted answer.
type Step struct {
	// Status, when not 0, answers with this HTTP status and an error body.
	Status int
	// RetryAfter is the Retry-After header of an error answer.
	RetryAfter string
	// Message and ErrorCode are an error answer's message (default "scripted failure
	// <status>") and, on the OpenAI wires, its code.
	Message, ErrorCode string
	// Text is the model's text.
	Text string
	// Code, when not nil, is the model's call of the python tool.
	Code *string
	// Usage is the usage object, as raw JSON; "" sends none.
	Usage string
	// Hold answers nothing until the client goes away.
	Hold bool
	// Stop, when not "", is the stop reason sent in place of the usual one.
	Stop string
	// Arguments, when not "", are the call's arguments sent as they are (Code must be
	// set too, and is not sent): a call cut short, for one.
	Arguments string
	// Replace lists pairs of old and new byte strings replaced in everything the answer
	// writes: how a test sends bytes that are not UTF-8, which no encoder writes.
	Replace []string
}

// replacer is a response writer that replaces byte strings in each write.
type replacer struct {
	http.ResponseWriter
	pairs []string
}

func (r replacer) Write(p []byte) (int, error) {
	out := p
	for i := 0; i+1 < len(r.pairs); i += 2 {
		out = bytes.ReplaceAll(out, []byte(r.pairs[i]), []byte(r.pairs[i+1]))
	}
	if _, err := r.ResponseWriter.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (r replacer) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Code is a pointer to code, for Step.Code.
func Code(code string) *string { return &code }

// Server is a scripted model server.
type Server struct {
	URL  string
	wire string
	srv  *httptest.Server

	mu      sync.Mutex
	steps   []Step
	bodies  [][]byte
	paths   []string
	headers []http.Header
	// Arrived is sent each request's index (0-based) as it arrives, when not full.
	Arrived chan int
}

// New starts a server of the wire format answering steps in order; a request past the
// last step gets a 500. It is closed when the test ends.
func New(t testing.TB, wire string, steps ...Step) *Server {
	s := &Server{wire: wire, steps: steps, Arrived: make(chan int, 64)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	if wire == OpenAIChat || wire == OpenAIResponses {
		s.URL += "/v1"
	}
	t.Cleanup(s.srv.Close)
	return s
}

// Add appends steps to the script.
func (s *Server) Add(steps ...Step) {
	s.mu.Lock()
	s.steps = append(s.steps, steps...)
	s.mu.Unlock()
}

// Paths are the URL paths of the requests received, in order.
func (s *Server) Paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.paths...)
}

// Headers are the headers of the requests received, in order.
func (s *Server) Headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.headers...)
}

// Bodies are the request bodies received, in order.
func (s *Server) Bodies() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.bodies...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	n := len(s.bodies)
	s.bodies = append(s.bodies, body)
	s.paths = append(s.paths, r.URL.Path)
	s.headers = append(s.headers, r.Header.Clone())
	var step Step
	ok := n < len(s.steps)
	if ok {
		step = s.steps[n]
	}
	s.mu.Unlock()
	select {
	case s.Arrived <- n:
	default:
	}
	if len(step.Replace) > 0 {
		w = replacer{ResponseWriter: w, pairs: step.Replace}
	}
	switch {
	case !ok:
		s.fail(w, http.StatusInternalServerError, fmt.Sprintf("no scripted step for request %d", n+1), "", "")
		return
	case step.Hold:
		<-r.Context().Done()
		return
	case step.Status != 0:
		msg := step.Message
		if msg == "" {
			msg = fmt.Sprintf("scripted failure %d", step.Status)
		}
		s.fail(w, step.Status, msg, step.ErrorCode, step.RetryAfter)
		return
	}
	var req struct {
		Stream bool `json:"stream"`
	}
	_ = json.Unmarshal(body, &req)
	switch s.wire {
	case OpenAIChat:
		if req.Stream {
			s.chatStream(w, n, step)
		} else {
			s.chatWhole(w, n, step)
		}
	case OpenAIResponses:
		s.responses(w, n, step)
	case Anthropic:
		s.anthropic(w, n, step)
	}
}

func (s *Server) fail(w http.ResponseWriter, status int, msg, code, retryAfter string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if s.wire == Anthropic {
		fmt.Fprintf(w, `{"type":"error","error":{"type":"api_error","message":%q}}`, msg)
		return
	}
	codeJSON := "null"
	if code != "" {
		codeJSON = fmt.Sprintf("%q", code)
	}
	fmt.Fprintf(w, `{"error":{"message":%q,"type":"server_error","param":null,"code":%s}}`, msg, codeJSON)
}

// obj is a JSON object with members in order, as the servers write them.
type obj []any // name, value, name, value…

func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := 0; i+1 < len(o); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(o[i])
		v, err := json.Marshal(o[i+1])
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func raw(s string) jsontext.Value {
	if s == "" {
		return jsontext.Value("null")
	}
	return jsontext.Value(s)
}

func arguments(code string) string {
	b, _ := json.Marshal(obj{"code", code})
	return string(b)
}

func (s *Server) chatWhole(w http.ResponseWriter, n int, step Step) {
	msg := obj{"role", "assistant", "content", nilIfEmpty(step.Text)}
	finish := "stop"
	if step.Code != nil {
		msg = append(msg, "tool_calls", []any{obj{"id", fmt.Sprintf("call_%d", n+1), "type", "function",
			"function", obj{"name", "python", "arguments", step.arguments()}}})
		finish = "tool_calls"
	}
	finish = step.stop(finish)
	res := obj{"id", fmt.Sprintf("chatcmpl-%d", n+1), "object", "chat.completion", "created", 1, "model", "scripted",
		"choices", []any{obj{"index", 0, "message", msg, "finish_reason", finish}}}
	if step.Usage != "" {
		res = append(res, "usage", raw(step.Usage))
	}
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(res)
	w.Write(b)
}

// arguments are the call's arguments as sent.
func (st Step) arguments() string {
	if st.Arguments != "" {
		return st.Arguments
	}
	return arguments(*st.Code)
}

// stop is the stop reason sent: Stop, or usual.
func (st Step) stop(usual string) string {
	if st.Stop != "" {
		return st.Stop
	}
	return usual
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// sse writes one event; name "" writes data alone.
func sse(w http.ResponseWriter, name string, data any) {
	b, _ := json.Marshal(data)
	if name != "" {
		fmt.Fprintf(w, "event: %s\n", name)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func startSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
}

// halves splits s in two, so that a stream carries it in two deltas.
func halves(s string) []string {
	i := len(s) / 2
	for i > 0 && i < len(s) && s[i]&0xC0 == 0x80 {
		i--
	}
	return []string{s[:i], s[i:]}
}

func (s *Server) chatStream(w http.ResponseWriter, n int, step Step) {
	startSSE(w)
	chunk := func(delta obj, finish any) obj {
		return obj{"id", fmt.Sprintf("chatcmpl-%d", n+1), "object", "chat.completion.chunk", "created", 1, "model", "scripted",
			"choices", []any{obj{"index", 0, "delta", delta, "finish_reason", finish}}}
	}
	sse(w, "", chunk(obj{"role", "assistant", "content", ""}, nil))
	if step.Text != "" {
		for _, part := range halves(step.Text) {
			sse(w, "", chunk(obj{"content", part}, nil))
		}
	}
	finish := "stop"
	if step.Code != nil {
		finish = "tool_calls"
		for i, part := range halves(step.arguments()) {
			call := obj{"index", 0, "function", obj{"arguments", part}}
			if i == 0 {
				call = obj{"index", 0, "id", fmt.Sprintf("call_%d", n+1), "type", "function", "function", obj{"name", "python", "arguments", part}}
			}
			sse(w, "", chunk(obj{"tool_calls", []any{call}}, nil))
		}
	}
	sse(w, "", chunk(obj{}, step.stop(finish)))
	if step.Usage != "" {
		sse(w, "", obj{"id", fmt.Sprintf("chatcmpl-%d", n+1), "object", "chat.completion.chunk", "created", 1,
			"model", "scripted", "choices", []any{}, "usage", raw(step.Usage)})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (s *Server) responses(w http.ResponseWriter, n int, step Step) {
	startSSE(w)
	id := fmt.Sprintf("resp_%d", n+1)
	response := func(status string, output []any, usage jsontext.Value) obj {
		return obj{"id", id, "object", "response", "created_at", 1, "model", "scripted", "status", status,
			"output", output, "usage", usage}
	}
	seq := 0
	event := func(name string, rest ...any) {
		seq++
		sse(w, name, append(obj{"type", name, "sequence_number", seq}, rest...))
	}
	event("response.created", "response", response("in_progress", []any{}, raw("")))
	var output []any
	if step.Text != "" {
		for _, part := range halves(step.Text) {
			event("response.output_text.delta", "item_id", "msg_1", "output_index", 0, "content_index", 0, "delta", part)
		}
		output = append(output, obj{"type", "message", "id", "msg_1", "status", "completed", "role", "assistant",
			"content", []any{obj{"type", "output_text", "text", step.Text, "annotations", []any{}}}})
	}
	if step.Code != nil {
		args := step.arguments()
		for _, part := range halves(args) {
			event("response.function_call_arguments.delta", "item_id", "fc_1", "output_index", len(output), "delta", part)
		}
		output = append(output, obj{"type", "function_call", "id", "fc_1", "call_id", fmt.Sprintf("call_%d", n+1),
			"name", "python", "arguments", args, "status", "completed"})
	}
	if reason, ok := strings.CutPrefix(step.Stop, "incomplete: "); ok {
		event("response.incomplete", "response", append(response("incomplete", output, raw(step.Usage)),
			"incomplete_details", obj{"reason", reason}))
		return
	}
	event("response.completed", "response", response("completed", output, raw(step.Usage)))
}

func (s *Server) anthropic(w http.ResponseWriter, n int, step Step) {
	startSSE(w)
	start, delta := anthropicUsage(step.Usage)
	sse(w, "message_start", obj{"type", "message_start", "message", obj{"id", fmt.Sprintf("msg_%d", n+1), "type", "message",
		"role", "assistant", "content", []any{}, "model", "scripted", "stop_reason", nil, "stop_sequence", nil, "usage", start}})
	sse(w, "ping", obj{"type", "ping"})
	index := 0
	if step.Text != "" {
		sse(w, "content_block_start", obj{"type", "content_block_start", "index", index, "content_block", obj{"type", "text", "text", ""}})
		for _, part := range halves(step.Text) {
			sse(w, "content_block_delta", obj{"type", "content_block_delta", "index", index, "delta", obj{"type", "text_delta", "text", part}})
		}
		sse(w, "content_block_stop", obj{"type", "content_block_stop", "index", index})
		index++
	}
	stop := "end_turn"
	if step.Code != nil {
		stop = "tool_use"
		sse(w, "content_block_start", obj{"type", "content_block_start", "index", index, "content_block",
			obj{"type", "tool_use", "id", fmt.Sprintf("toolu_%d", n+1), "name", "python", "input", obj{}}})
		for _, part := range halves(step.arguments()) {
			sse(w, "content_block_delta", obj{"type", "content_block_delta", "index", index, "delta", obj{"type", "input_json_delta", "partial_json", part}})
		}
		sse(w, "content_block_stop", obj{"type", "content_block_stop", "index", index})
	}
	sse(w, "message_delta", obj{"type", "message_delta", "delta", obj{"stop_reason", step.stop(stop), "stop_sequence", nil}, "usage", delta})
	sse(w, "message_stop", obj{"type", "message_stop"})
}

// anthropicUsage splits a usage object as the Messages API streams it: message_start
// carries every member with output_tokens 1, message_delta the final output_tokens.
func anthropicUsage(usage string) (start, delta jsontext.Value) {
	if usage == "" {
		return raw(""), raw("")
	}
	var members map[string]jsontext.Value
	if err := json.Unmarshal([]byte(usage), &members); err != nil {
		return raw(usage), raw("")
	}
	var names []string
	dec := jsontext.NewDecoder(strings.NewReader(usage))
	dec.ReadToken()
	for dec.PeekKind() != '}' {
		tok, _ := dec.ReadToken()
		names = append(names, tok.String())
		dec.SkipValue()
	}
	var s obj
	for _, name := range names {
		if name == "output_tokens" {
			s = append(s, name, 1)
			continue
		}
		s = append(s, name, members[name])
	}
	sb, _ := json.Marshal(s)
	d := raw("")
	if out, ok := members["output_tokens"]; ok {
		db, _ := json.Marshal(obj{"output_tokens", out})
		d = db
	}
	return sb, d
}

// Conversation splits a request body of the wire format into the part that carries the
// conversation, without its closing bracket, and the tools and system text before it.
// On the Anthropic wire the rolling cache breakpoint is taken out of the conversation,
// since it moves to the last block as the conversation grows.
func Conversation(wire string, body []byte) (head, convo []byte, err error) {
	var m map[string]jsontext.Value
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, nil, err
	}
	key := "messages"
	if wire == OpenAIResponses {
		key = "input"
	}
	convo = bytes.TrimSuffix(m[key], []byte("]"))
	if wire == Anthropic {
		convo = bytes.ReplaceAll(convo, []byte(`,"cache_control":{"type":"ephemeral"}`), nil)
	}
	head = append(append(append([]byte{}, m["tools"]...), m["system"]...), m["instructions"]...)
	return head, convo, nil
}
