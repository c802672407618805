package route_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/route"
)

// rawServer answers every request with status and body, as text/event-stream when the
// body is a stream of events.
func rawServer(t *testing.T, status int, header http.Header, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header()[k] = v
		}
		if strings.HasPrefix(body, "event:") || strings.HasPrefix(body, "data:") {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func call(t *testing.T, cfg route.Config) (route.Reply, error) {
	t.Helper()
	cfg.Model, cfg.APIKey, cfg.Tools, cfg.Backoff = "m", "k", true, time.Millisecond
	c, err := route.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c.Call(t.Context(), route.Request{System: "h", Messages: []route.Message{{Role: route.RoleUser, Text: "hi"}}})
}

// TestAStreamedCallIndexMustBeInRange streams a tool call at index -1, then one past
// the cap: each reply is refused as malformed, not a panic.
func TestAStreamedCallIndexMustBeInRange(t *testing.T) {
	for _, index := range []string{"-1", "65"} {
		body := `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":` +
			index + `,"id":"c","type":"function","function":{"name":"python","arguments":"{}"}}]},"finish_reason":null}]}` + "\n\ndata: [DONE]\n\n"
		_, err := call(t, route.Config{Kind: route.KindOpenAIChat, Stream: true, BaseURL: rawServer(t, 200, nil, body)})
		if !errors.Is(err, route.ErrMalformed) {
			t.Errorf("index %s: got %v; want ErrMalformed", index, err)
		}
	}
}

// anthropicStream is a Messages API stream of the given content events.
func anthropicStream(events ...string) string {
	var b strings.Builder
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n")
	for _, e := range events {
		kind := e[len(`{"type":"`):strings.Index(e, `",`)]
		b.WriteString("event: " + kind + "\ndata: " + e + "\n\n")
	}
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\n")
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return b.String()
}

// TestAnthropicDeltasGoToTheBlockTheyName interleaves a text block's start between a
// tool call's start and its input: the input is the call's, the text the text's.
func TestAnthropicDeltasGoToTheBlockTheyName(t *testing.T) {
	body := anthropicStream(
		`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"python","input":{}}}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"code\": \"6 * 7\"}"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me see."}}`,
	)
	r, err := call(t, route.Config{Kind: route.KindAnthropic, BaseURL: rawServer(t, 200, nil, body)})
	if err != nil || r.Call == nil || r.Call.Code != "6 * 7" || r.Call.Problem != "" || r.Text != "Let me see." {
		t.Fatalf("got %+v %+v, %v; want the code 6 * 7 and the text apart", r, r.Call, err)
	}
	for name, events := range map[string][]string{
		"a delta of a block not started": {`{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}}`},
		"a block started out of order":   {`{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}`},
	} {
		if _, err := call(t, route.Config{Kind: route.KindAnthropic, BaseURL: rawServer(t, 200, nil, anthropicStream(events...))}); !errors.Is(err, route.ErrMalformed) {
			t.Errorf("%s: got %v; want ErrMalformed", name, err)
		}
	}
}

// TestACallWithoutCodeIsRefused sends a python call whose input is empty: it is a call
// with a problem, not an empty cell to run.
func TestACallWithoutCodeIsRefused(t *testing.T) {
	body := anthropicStream(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"python","input":{}}}`)
	r, err := call(t, route.Config{Kind: route.KindAnthropic, BaseURL: rawServer(t, 200, nil, body)})
	if err != nil || r.Call == nil || !strings.Contains(r.Call.Problem, "no \"code\"") {
		t.Fatalf("got %+v %+v, %v; want a call refused for want of code", r, r.Call, err)
	}
}

// TestAnErrorsTextIsCut answers with an error whose body is 1 MiB: what the route
// reports and records of it is cut.
func TestAnErrorsTextIsCut(t *testing.T) {
	body := `{"error":{"message":"overloaded ` + strings.Repeat("x", 1<<20) + `","type":"server_error"}}`
	_, err := call(t, route.Config{Kind: route.KindOpenAIChat, BaseURL: rawServer(t, 500, nil, body)})
	var ce *route.CallError
	if !errors.As(err, &ce) || len(ce.Failures) != route.MaxAttempts {
		t.Fatalf("got %v; want %d failures", err, route.MaxAttempts)
	}
	if n := len(err.Error()); n > route.MaxErrorBytes+100 {
		t.Errorf("the error's text is %d bytes; want at most about %d", n, route.MaxErrorBytes)
	}
	for i, f := range ce.Failures {
		if len(f.Error) > route.MaxErrorBytes+len("…") {
			t.Errorf("failure %d: %d bytes of error text; want at most %d", i, len(f.Error), route.MaxErrorBytes)
		}
		if last := i == len(ce.Failures)-1; last != (f.RetryAfterNs == 0) {
			t.Errorf("failure %d: a wait of %d ns recorded; want one before each retry only", i, f.RetryAfterNs)
		}
	}
}
