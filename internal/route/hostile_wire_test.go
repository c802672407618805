package route_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/route"
	"github.com/kilnrt/kiln/internal/route/routetest"
)

// bad is a placeholder the scripted servers replace with bytes that are not UTF-8.
const bad = "BADBYTES"

var notUTF8 = []string{bad, "\xff\xfe"}

var req = route.Request{System: "h", Messages: []route.Message{{Role: route.RoleUser, Text: "hi"}}}

// TestErrorBodiesThatAreNotUTF8 answers each wire with a 400 whose message holds bytes
// that are not UTF-8, and with a proxy's HTML page of them: the error the route reports
// and records is valid UTF-8, the bytes replaced, not dropped.
func TestErrorBodiesThatAreNotUTF8(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			srv := routetest.New(t, w.wire, routetest.Step{Status: 400, Message: "bad " + bad + " request", Replace: notUTF8})
			_, err := client(t, w.cfg, srv).Call(t.Context(), req)
			var ce *route.CallError
			if !errors.As(err, &ce) || len(ce.Failures) != 1 {
				t.Fatalf("got %v; want one failure", err)
			}
			for _, text := range []string{err.Error(), ce.Failures[0].Error} {
				if !utf8.ValidString(text) || !strings.Contains(text, "\uFFFD") {
					t.Errorf("error text %q: want valid UTF-8 with the bytes replaced", text)
				}
			}
			page := rawServer(t, 502, http.Header{"Content-Type": {"text/html"}}, "<html>\xff\xfe proxy error</html>")
			cfg := w.cfg
			cfg.BaseURL = page
			_, err = call(t, cfg)
			if err == nil || !utf8.ValidString(err.Error()) {
				t.Errorf("an HTML page not in UTF-8: %q", err)
			}
		})
	}
}

// TestTextAndCodeThatAreNotUTF8 has the model send text and code holding bytes that are
// not UTF-8: the reply is kept, made valid, and its code runs.
func TestTextAndCodeThatAreNotUTF8(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			code := "print('" + bad + "')  # a cell long enough that its halves do not cut the placeholder"
			srv := routetest.New(t, w.wire, routetest.Step{Text: bad + " thinking, at some length, about what to do", Code: &code, Replace: notUTF8})
			r, err := client(t, w.cfg, srv).Call(t.Context(), req)
			if err != nil || r.Call == nil || r.Call.Problem != "" {
				t.Fatalf("got %+v %+v, %v; want the reply kept", r, r.Call, err)
			}
			for _, text := range []string{r.Text, r.Call.Code, r.Call.Arguments} {
				if !utf8.ValidString(text) || strings.Contains(text, bad) || !strings.Contains(text, "\uFFFD") {
					t.Errorf("%q: want valid UTF-8, the bytes replaced", text)
				}
			}
		})
	}
}

// TestUsageThatDoesNotParseKeepsTheReply sends usage objects kiln cannot read: the reply
// is kept, with no usage and the problem said.
func TestUsageThatDoesNotParseKeepsTheReply(t *testing.T) {
	for _, w := range wires {
		for _, u := range []string{`{"prompt_tokens":2.0,"completion_tokens":1}`, `{"input_tokens":-1,"output_tokens":1}`,
			`{"prompt_tokens":1,"input_tokens":1}`} {
			t.Run(w.name+"/"+u, func(t *testing.T) {
				srv := routetest.New(t, w.wire, routetest.Step{Text: "fine", Code: routetest.Code("1"), Usage: u})
				r, err := client(t, w.cfg, srv).Call(t.Context(), req)
				if err != nil || r.Call == nil || r.Call.Code != "1" {
					t.Fatalf("got %+v, %v; want the reply kept", r, err)
				}
				if r.Usage != nil || r.UsageProblem == "" {
					t.Errorf("usage %+v, problem %q; want none, and the problem said", r.Usage, r.UsageProblem)
				}
			})
		}
	}
}

// TestRedirectsToAnotherOriginAreRefused answers each wire with 307 and 302 to another
// origin (another port of the same host): the route does not follow, does not retry,
// and the other origin never sees the request or the key.
func TestRedirectsToAnotherOriginAreRefused(t *testing.T) {
	var reached atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.WriteHeader(500)
	}))
	defer other.Close()
	for _, w := range wires {
		for _, status := range []int{307, 302} {
			t.Run(w.name, func(t *testing.T) {
				var asked atomic.Int32
				srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
					asked.Add(1)
					http.Redirect(rw, r, other.URL+r.URL.Path, status)
				}))
				defer srv.Close()
				cfg := w.cfg
				cfg.BaseURL = srv.URL
				_, err := call(t, cfg)
				if !errors.Is(err, route.ErrRedirect) {
					t.Errorf("got %v; want ErrRedirect", err)
				}
				if n := asked.Load(); n != 1 {
					t.Errorf("%d requests; want one, not retried", n)
				}
			})
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the other origin was sent %d requests", n)
	}
}

// cutStop is each wire's stop reason for a reply cut at its output bound.
func cutStop(wire string) string {
	switch wire {
	case routetest.Anthropic:
		return "max_tokens"
	case routetest.OpenAIResponses:
		return "incomplete: max_output_tokens"
	}
	return "length"
}

// TestACallCutAtTheOutputBound sends a call whose arguments were cut short with the stop
// reason that says so: the problem the model reads names the bound, not a JSON error.
func TestACallCutAtTheOutputBound(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			srv := routetest.New(t, w.wire, routetest.Step{Code: routetest.Code(""), Arguments: `{"code": "print(1)\nprint(2`, Stop: cutStop(w.wire)})
			r, err := client(t, w.cfg, srv).Call(t.Context(), req)
			if err != nil || r.Call == nil || !strings.Contains(r.Call.Problem, "output bound") || strings.Contains(r.Call.Problem, "EOF") {
				t.Fatalf("got %+v %+v, %v; want a problem naming the output bound", r, r.Call, err)
			}
		})
	}
	srv := routetest.New(t, routetest.OpenAIChat, routetest.Step{Text: "Here:\n```python\nprint(1)\nprint(", Stop: "length"})
	c, _ := route.New(route.Config{Kind: route.KindOpenAIChat, BaseURL: srv.URL, Model: "m"})
	r, err := c.Call(t.Context(), req)
	if err != nil || r.Call == nil || !strings.Contains(r.Call.Problem, "output bound") {
		t.Fatalf("a block left open: got %+v %+v, %v", r, r.Call, err)
	}
}

// TestContextLengthExceeded answers each wire the way its providers refuse a request over
// the window: the error is ErrContextLength, not retried.
func TestContextLengthExceeded(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			step := routetest.Step{Status: 400, ErrorCode: "context_length_exceeded",
				Message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens."}
			if w.wire == routetest.Anthropic {
				step = routetest.Step{Status: 400, Message: "prompt is too long: 210000 tokens > 200000 maximum"}
			}
			srv := routetest.New(t, w.wire, step)
			_, err := client(t, w.cfg, srv).Call(t.Context(), req)
			var ce *route.CallError
			if !errors.Is(err, route.ErrContextLength) || !errors.As(err, &ce) || len(ce.Failures) != 1 {
				t.Fatalf("got %v; want ErrContextLength after one attempt", err)
			}
		})
	}
}

// TestAnthropicCacheBreakpoints asserts the request body: cache_control on the system
// block, on the summary, and on the last block of the conversation, nowhere else.
func TestAnthropicCacheBreakpoints(t *testing.T) {
	srv := routetest.New(t, routetest.Anthropic, routetest.Step{Text: "a"})
	c := client(t, route.Config{Kind: route.KindAnthropic}, srv)
	if _, err := c.Call(t.Context(), route.Request{System: "the header", Summary: "the summary", Messages: conversation(2)}); err != nil {
		t.Fatal(err)
	}
	var body struct {
		System []struct {
			Text         string         `json:"text"`
			CacheControl jsontext.Value `json:"cache_control"`
		} `json:"system"`
		Messages []struct {
			Content []map[string]jsontext.Value `json:"content"`
		} `json:"messages"`
	}
	raw := srv.Bodies()[0]
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	eph := `{"type":"ephemeral"}`
	if len(body.System) != 2 || string(body.System[0].CacheControl) != eph || string(body.System[1].CacheControl) != eph ||
		body.System[1].Text != "the summary" {
		t.Errorf("system blocks %+v; want a breakpoint on the header and on the summary", body.System)
	}
	msgs := body.Messages
	last := msgs[len(msgs)-1].Content
	if string(last[len(last)-1]["cache_control"]) != eph {
		t.Errorf("the last block %v has no breakpoint", last[len(last)-1])
	}
	if n := bytes.Count(raw, []byte(`"cache_control"`)); n != 3 {
		t.Errorf("%d breakpoints; want 3", n)
	}
}

// TestAnthropicBaseURLWithV1 gives an anthropic route a base URL ending in /v1, as
// OpenAI's are given: the request goes to /v1/messages, not /v1/v1/messages.
func TestAnthropicBaseURLWithV1(t *testing.T) {
	for _, suffix := range []string{"", "/", "/v1", "/v1/"} {
		srv := routetest.New(t, routetest.Anthropic, routetest.Step{Text: "a"})
		c, _ := route.New(route.Config{Kind: route.KindAnthropic, BaseURL: srv.URL + suffix, Model: "m", APIKey: "k"})
		if _, err := c.Call(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if p := srv.Paths(); len(p) != 1 || p[0] != "/v1/messages" {
			t.Errorf("base %q: paths %v; want /v1/messages", suffix, p)
		}
	}
}

// TestARouteWithoutToolsIsToldTheProtocol: the system text of every wire, on a route
// without tools, says how to write code, speak and wait.
func TestARouteWithoutToolsIsToldTheProtocol(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			srv := routetest.New(t, w.wire, routetest.Step{Text: "a"})
			cfg := w.cfg
			cfg.BaseURL, cfg.Model = srv.URL, "m"
			c, _ := route.New(cfg)
			if _, err := c.Call(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			body := srv.Bodies()[0]
			for _, want := range []string{"```python", "local.send", "runtime.wait"} {
				if !bytes.Contains(body, []byte(want)) {
					t.Errorf("the request does not say %q:\n%s", want, body)
				}
			}
			if bytes.Contains(body, []byte(`"tools"`)) {
				t.Error("a route without tools was sent one")
			}
		})
	}
}
