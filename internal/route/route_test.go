package route_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/route"
	"github.com/kilnrt/kiln/internal/route/routetest"
)

// wires are the wire formats, each with the route config that speaks it.
var wires = []struct {
	name, wire string
	cfg        route.Config
}{
	{"chat-stream", routetest.OpenAIChat, route.Config{Kind: route.KindOpenAIChat, Stream: true}},
	{"chat-whole", routetest.OpenAIChat, route.Config{Kind: route.KindOpenAIChat}},
	{"responses", routetest.OpenAIResponses, route.Config{Kind: route.KindOpenAIResponses}},
	{"anthropic", routetest.Anthropic, route.Config{Kind: route.KindAnthropic}},
}

func client(t *testing.T, cfg route.Config, srv *routetest.Server) route.Client {
	t.Helper()
	cfg.BaseURL, cfg.Model, cfg.APIKey, cfg.Tools = srv.URL, "test-model", "k", true
	cfg.Backoff, cfg.Cache = time.Millisecond, []string{"prompt_cache_key"}
	c, err := route.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func usageFor(wire string, zero bool) string {
	n := func(v string) string {
		if zero {
			return "0"
		}
		return v
	}
	switch wire {
	case routetest.Anthropic:
		return `{"input_tokens":` + n("12") + `,"cache_creation_input_tokens":` + n("3") + `,"cache_read_input_tokens":` + n("100") + `,"output_tokens":` + n("7") + `}`
	case routetest.OpenAIResponses:
		return `{"input_tokens":` + n("115") + `,"input_tokens_details":{"cached_tokens":` + n("100") + `},"output_tokens":` + n("7") + `,"total_tokens":` + n("122") + `}`
	}
	return `{"prompt_tokens":` + n("115") + `,"prompt_tokens_details":{"cached_tokens":` + n("100") + `},"completion_tokens":` + n("7") + `,"total_tokens":` + n("122") + `}`
}

func TestReplyAndUsage(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			code := "x = 'é' * 3\nprint(x)\n"
			srv := routetest.New(t, w.wire,
				routetest.Step{Text: "thinking aloud", Code: routetest.Code(code), Usage: usageFor(w.wire, false)},
				routetest.Step{Text: "only text"},
				routetest.Step{Text: "zero", Usage: usageFor(w.wire, true)})
			c := client(t, w.cfg, srv)
			req := route.Request{System: "the header", Messages: []route.Message{{Role: route.RoleUser, Text: "hi"}}, CacheKey: "s-1"}
			r, err := c.Call(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if r.Call == nil || r.Call.Code != code || r.Call.Problem != "" || r.Text != "thinking aloud" {
				t.Fatalf("got %+v call %+v", r, r.Call)
			}
			if r.Usage == nil || r.Usage.CachedPromptTokens == nil || r.Usage.CachedPromptTokens.Value != 100 || r.Usage.CompletionTokens.Value != 7 {
				t.Fatalf("usage %+v", r.Usage)
			}
			if r, err = c.Call(t.Context(), req); err != nil || r.Call != nil || r.Text != "only text" || r.Usage != nil {
				t.Fatalf("got %+v, %v; want text, no usage", r, err)
			}
			if r, err = c.Call(t.Context(), req); err != nil || r.Usage == nil || r.Usage.CachedPromptTokens == nil || r.Usage.CachedPromptTokens.Value != 0 {
				t.Fatalf("got %+v, %v; want reported zeros", r.Usage, err)
			}
			var body map[string]jsontext.Value
			if err := json.Unmarshal(srv.Bodies()[0], &body); err != nil {
				t.Fatal(err)
			}
			if w.wire == routetest.Anthropic {
				if !bytes.Contains(body["tool_choice"], []byte(`"disable_parallel_tool_use":true`)) {
					t.Errorf("tool_choice %s", body["tool_choice"])
				}
			} else {
				if string(body["parallel_tool_calls"]) != "false" || string(body["prompt_cache_key"]) != `"s-1"` {
					t.Errorf("parallel_tool_calls %s, prompt_cache_key %s", body["parallel_tool_calls"], body["prompt_cache_key"])
				}
				if _, ok := body["prompt_cache_retention"]; ok {
					t.Error("prompt_cache_retention sent to a route that did not declare it")
				}
			}
		})
	}
}

// conversation is the messages a growing conversation has after each step.
func conversation(steps int) []route.Message {
	msgs := []route.Message{{Role: route.RoleUser, Text: "[2026-09-13T18:59:00Z · operator]\ndo the thing"}}
	for i := range steps {
		code := strings.Repeat("print(1)\n", i+1)
		msgs = append(msgs,
			route.Message{Role: route.RoleAssistant, Call: &route.Call{ID: "call_" + string(rune('a'+i)), Arguments: `{"code": ` + quote(code) + `}`, Code: code}},
			route.Message{Role: route.RoleTool, CallID: "call_" + string(rune('a'+i)), Text: "[2026-09-13T21:17:22Z · ran 420ms]\n1\n"})
	}
	return msgs
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestAppendOnlyRequests(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			srv := routetest.New(t, w.wire, routetest.Step{Text: "a"}, routetest.Step{Text: "b"}, routetest.Step{Text: "c"})
			c := client(t, w.cfg, srv)
			for _, steps := range []int{0, 1, 3} {
				if _, err := c.Call(t.Context(), route.Request{System: "the header", Summary: "the summary", Messages: conversation(steps)}); err != nil {
					t.Fatal(err)
				}
			}
			bodies := srv.Bodies()
			for i := 1; i < len(bodies); i++ {
				h0, c0, err0 := routetest.Conversation(w.wire, bodies[i-1])
				h1, c1, err1 := routetest.Conversation(w.wire, bodies[i])
				if err0 != nil || err1 != nil {
					t.Fatal(err0, err1)
				}
				if !bytes.Equal(h0, h1) || len(h0) == 0 {
					t.Errorf("request %d: tools and system changed", i+1)
				}
				if !bytes.HasPrefix(c1, c0) || len(c1) <= len(c0) {
					t.Errorf("request %d does not extend request %d:\n%s\n%s", i+1, i, c0, c1)
				}
			}
		})
	}
}

func TestRetries(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			srv := routetest.New(t, w.wire,
				routetest.Step{Status: 429, RetryAfter: "1"}, routetest.Step{Text: "ok"},
				routetest.Step{Status: 500}, routetest.Step{Status: 502}, routetest.Step{Status: 503},
				routetest.Step{Status: 400})
			c := client(t, w.cfg, srv)
			req := route.Request{System: "h", Messages: []route.Message{{Role: route.RoleUser, Text: "hi"}}}
			began := time.Now()
			r, err := c.Call(t.Context(), req)
			if err != nil || r.Text != "ok" || len(r.Failures) != 1 || r.Failures[0].Status != 429 || r.Failures[0].RetryAfterNs != time.Second.Nanoseconds() {
				t.Fatalf("got %+v, %v", r, err)
			}
			if waited := time.Since(began); waited < time.Second {
				t.Errorf("retried after %v, before the Retry-After of 1s", waited)
			}
			_, err = c.Call(t.Context(), req)
			var ce *route.CallError
			if !errors.As(err, &ce) || len(ce.Failures) != route.MaxAttempts || ce.Failures[2].Status != 503 {
				t.Fatalf("got %v; want %d failures", err, route.MaxAttempts)
			}
			_, err = c.Call(t.Context(), req)
			if !errors.As(err, &ce) || len(ce.Failures) != 1 || ce.Failures[0].Status != 400 {
				t.Fatalf("a 400 was retried or not failed: %v", err)
			}
			if n := len(srv.Bodies()); n != 6 {
				t.Errorf("%d requests; want 6", n)
			}
		})
	}
}

func TestTimeoutAndCancel(t *testing.T) {
	srv := routetest.New(t, routetest.OpenAIChat, routetest.Step{Hold: true}, routetest.Step{Hold: true},
		routetest.Step{Hold: true}, routetest.Step{Hold: true})
	c := client(t, route.Config{Kind: route.KindOpenAIChat, Stream: true, Timeout: 20 * time.Millisecond}, srv)
	req := route.Request{System: "h", Messages: []route.Message{{Role: route.RoleUser, Text: "hi"}}}
	var ce *route.CallError
	if _, err := c.Call(t.Context(), req); !errors.As(err, &ce) || len(ce.Failures) != route.MaxAttempts {
		t.Fatalf("got %v; want %d timed-out attempts", err, route.MaxAttempts)
	}
	c = client(t, route.Config{Kind: route.KindOpenAIChat, Stream: true}, srv)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for n := range srv.Arrived {
			if n == 3 {
				cancel()
				return
			}
		}
	}()
	if _, err := c.Call(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v; want cancelled", err)
	}
}

func TestResponseLimit(t *testing.T) {
	for _, size := range []int{route.MaxResponseBytes - 4096, route.MaxResponseBytes + 1} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			pad := strings.Repeat(" ", size)
			w.Write([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]` + pad + `}`))
		}))
		c, _ := route.New(route.Config{Kind: route.KindOpenAIChat, BaseURL: srv.URL, Model: "m", Backoff: time.Millisecond})
		_, err := c.Call(t.Context(), route.Request{System: "h", Messages: []route.Message{{Role: route.RoleUser, Text: "hi"}}})
		if over := size > route.MaxResponseBytes; over != errors.Is(err, route.ErrResponseTooLarge) {
			t.Errorf("a body of %d bytes: %v", size, err)
		}
		srv.Close()
	}
}

func TestTextRouteFences(t *testing.T) {
	srv := routetest.New(t, routetest.OpenAIChat,
		routetest.Step{Text: "Let me look.\n```python\nprint(2)\n```\nObservation: 2\n```python\nprint(3)\n```"})
	c, _ := route.New(route.Config{Kind: route.KindOpenAIChat, BaseURL: srv.URL, Model: "m"})
	r, err := c.Call(t.Context(), route.Request{System: "h", Messages: []route.Message{{Role: route.RoleUser, Text: "hi"}}})
	if err != nil || r.Call == nil || r.Call.Code != "print(2)\n" || r.Text != "Let me look.\n```python\nprint(2)\n```" {
		t.Fatalf("got %+v, %v", r, err)
	}
	if bytes.Contains(srv.Bodies()[0], []byte(`"tools"`)) {
		t.Error("a route without tools was sent a tool")
	}
}

func TestBadArguments(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` +
			`{"id":"c1","type":"function","function":{"name":"python","arguments":"{\"cod\": 1}"}},` +
			`{"id":"c2","type":"function","function":{"name":"python","arguments":"{\"code\": \"1\"}"}}]},"finish_reason":"tool_calls"}]}`))
	}))
	defer srv.Close()
	c, _ := route.New(route.Config{Kind: route.KindOpenAIChat, BaseURL: srv.URL, Model: "m", Tools: true})
	r, err := c.Call(t.Context(), route.Request{System: "h", Messages: []route.Message{{Role: route.RoleUser, Text: "hi"}}})
	if err != nil || r.Call == nil || r.Call.Problem == "" || r.Call.ID != "c1" || r.DroppedCalls != 1 {
		t.Fatalf("got %+v %+v, %v", r, r.Call, err)
	}
}

func TestScript(t *testing.T) {
	replies, err := route.ParseScript([]byte(`{"code":"print(1)","usage":{"prompt_tokens":10,"completion_tokens":2}}

{"text":"done"}
{"error":"overloaded"}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := route.NewScript(replies)
	req := route.Request{System: "h"}
	if r, err := s.Call(t.Context(), req); err != nil || r.Call.Code != "print(1)" || r.Usage.PromptTokens.Value != 10 || r.Usage.CachedPromptTokens != nil {
		t.Fatalf("got %+v, %v", r, err)
	}
	if r, err := s.Call(t.Context(), req); err != nil || r.Call != nil || r.Text != "done" || r.Usage != nil {
		t.Fatalf("got %+v, %v", r, err)
	}
	if _, err := s.Call(t.Context(), req); err == nil || !strings.Contains(err.Error(), "overloaded") {
		t.Fatalf("got %v", err)
	}
	if _, err := s.Call(t.Context(), req); !errors.Is(err, route.ErrScriptExhausted) || !strings.Contains(err.Error(), "this is call 4") {
		t.Fatalf("got %v", err)
	}
	if _, err := route.ParseScript([]byte("{\"text\":\"a\"}\n{\"txt\":\"b\"}\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("an unknown member: %v", err)
	}
}

func FuzzFenced(f *testing.F) {
	for _, s := range []string{"", "```python\n```", "a```python\nx\n```b", "```python\nx", "```python\n\n```\n```python\ny\n```"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		kept, code, ok := route.Fenced(text)
		if !strings.HasPrefix(text, kept) {
			t.Fatalf("kept %q is not a prefix of %q", kept, text)
		}
		if !ok && (kept != text || code != "") {
			t.Fatalf("no block, yet kept %q code %q", kept, code)
		}
		if ok && (!strings.HasSuffix(kept, "```") || !strings.Contains(kept, code)) {
			t.Fatalf("kept %q code %q", kept, code)
		}
	})
}

func FuzzParseScript(f *testing.F) {
	f.Add([]byte(`{"code":"x","usage":{"input_tokens":1,"output_tokens":2}}` + "\n" + `{"text":"t","hold":true}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		replies, err := route.ParseScript(data)
		if err == nil && len(replies) > route.MaxScriptReplies {
			t.Fatalf("%d replies", len(replies))
		}
	})
}
