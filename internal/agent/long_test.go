package agent_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/agent"
	"github.com/kilnrt/kiln/internal/route"
)

// reactiveModel is a scripted OpenAI chat server that answers by what it is sent, as a
// model does: a summary to the fold instruction, code that prints to an input (a large
// print every tenth turn), a wait after a result, and, once, a refusal of a request as
// over its window.
type reactiveModel struct {
	mu      sync.Mutex
	refused bool
	calls   int
}

func (m *reactiveModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	m.mu.Lock()
	m.calls++
	last := req.Messages[len(req.Messages)-1]
	refuse := !m.refused && strings.HasSuffix(last.Content, "turn 100")
	m.refused = m.refused || refuse
	m.mu.Unlock()
	if refuse {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		w.Write([]byte(`{"error":{"message":"This model's maximum context length is 6000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`))
		return
	}
	var text, code string
	switch {
	case strings.Contains(last.Content, "Summarize the conversation so far"):
		text = "Goal: answer each turn.\nProgress: many turns answered.\nDecisions: print, then wait.\nNext steps: wait for the next turn.\nFiles: none."
	case last.Role == "tool" || strings.Contains(last.Content, "Carry on"):
		code = waitCode
	default:
		n := 1500
		if strings.HasSuffix(last.Content, "0") { // every tenth turn overflows in its middle
			n = 9000
		}
		code = fmt.Sprintf("print('x' * %d)", n)
	}
	msg := map[string]any{"role": "assistant", "content": text}
	finish := "stop"
	if code != "" {
		args, _ := json.Marshal(map[string]string{"code": code})
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": fmt.Sprintf("c%d", m.calls),
			"type": "function", "function": map[string]any{"name": "python", "arguments": string(args)}}}}
		finish = "tool_calls"
	}
	res, _ := json.Marshal(map[string]any{"id": "x", "object": "chat.completion", "created": 1, "model": "reactive",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": len(body) / 3, "prompt_tokens_details": map[string]any{"cached_tokens": 0}, "completion_tokens": 20}})
	w.Header().Set("Content-Type", "application/json")
	w.Write(res)
}

// TestALongSessionOnASmallWindow runs 200 turns on a window of 6,000 tokens: the session
// folds at turn boundaries, overflows in the middle of every tenth turn and folds there,
// is refused once as over the window, and keeps working to the end: every turn ends
// once, waited; no fold follows another without a step between; the cost stays under
// the session's cap.
func TestALongSessionOnASmallWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("200 turns")
	}
	srv := httptest.NewServer(&reactiveModel{})
	defer srv.Close()
	c, err := route.New(route.Config{Name: "small", Kind: route.KindOpenAIChat, BaseURL: srv.URL, Model: "m", Tools: true})
	if err != nil {
		t.Fatal(err)
	}
	r := agent.Route{Name: "small", Client: c, ContextTokens: 6000, Price: agent.Price{Input: price(1), CachedInput: price(0.5), Output: price(4)}}
	s := newSession(t)
	const turns, sessionCap = 200, 5_000_000
	a := agent.New(s, agent.Config{Step: r, Header: agent.Header{Text: "the header"}, MaxSteps: 10, MaxSessionCostMicro: sessionCap})
	for i := 1; i <= turns; i++ {
		end, err := a.Turn(t.Context(), []agent.Input{input(int64(i), fmt.Sprintf("turn %d", i))})
		if err != nil || end.EndReason != agent.EndWaited {
			t.Fatalf("turn %d: %+v, %v", i, end, err)
		}
	}
	var ends, folds, midTurn, refused int
	var spent int64
	lastFold := -1
	for i, rec := range s.records {
		switch r := rec.(type) {
		case *agent.TurnEnd:
			ends++
		case *agent.Fold:
			if r.Error != "" {
				t.Errorf("fold before turn %d failed: %s", r.Turn, r.Error)
			}
			folds++
		case *agent.ModelCall:
			if r.Charged != nil {
				spent += r.Charged.Micros
			}
			if strings.Contains(r.Error, "context window") {
				refused++
			}
			if r.Purpose == agent.PurposeFold {
				if lastFold == i-2 { // a fold call, its fold record, then at once another fold call
					t.Errorf("a fold loop at record %d", i)
				}
				lastFold = i
				if s.records[i+1].(*agent.Fold).Turn%10 == 0 {
					midTurn++
				}
			}
		}
	}
	if ends != turns || folds < turns/10 || midTurn < 10 || spent >= sessionCap || refused != 1 {
		t.Errorf("%d ends, %d folds (%d in tenth turns), %d refused, %d µ$ spent; want %d ends, folds in every tenth turn, one refusal, under %d µ$",
			ends, folds, midTurn, refused, spent, turns, sessionCap)
	}
	t.Logf("%d turns, %d folds, %d µ$", ends, folds, spent)
}
