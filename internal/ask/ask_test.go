package ask

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/wire"
)

func request(t *testing.T, prompt string) *host.Request {
	t.Helper()
	body, err := json.Marshal(map[string]string{"method": Method, "prompt": prompt})
	if err != nil {
		t.Fatal(err)
	}
	return &host.Request{Method: Method, ExecutionID: "c-1", Body: body}
}

func TestPromptAndAnswerAtTheirLimitsAndOnePast(t *testing.T) {
	echo := Service{Answer: func(_ context.Context, _, prompt string) (string, error) {
		return strings.Repeat("a", len(prompt)), nil
	}}
	for _, c := range []struct {
		size int
		code string
	}{{MaxPromptBytes, ""}, {MaxPromptBytes + 1, host.CodeInvalidRequest}} {
		got := echo.Serve(context.Background(), request(t, strings.Repeat("p", c.size))).Reply
		if got.Code != c.code {
			t.Errorf("prompt of %d bytes: got %+v; want code %q", c.size, got, c.code)
		}
	}
	for _, c := range []struct {
		size int
		code string
	}{{MaxAnswerBytes, ""}, {MaxAnswerBytes + 1, CodeAnswerTooLong}} {
		s := Service{Answer: func(context.Context, string, string) (string, error) { return strings.Repeat("a", c.size), nil }}
		if got := s.Serve(context.Background(), request(t, "")).Reply; got.Code != c.code {
			t.Errorf("answer of %d bytes: got code %q; want %q", c.size, got.Code, c.code)
		}
	}
}

func TestNoOneAndTheEndOfTheInput(t *testing.T) {
	if got := (Service{}).Serve(context.Background(), request(t, "x")).Reply; got.Code != CodeNoInput || got.Message != NoOne {
		t.Errorf("no answerer: got %+v", got)
	}
	eof := Service{Answer: func(context.Context, string, string) (string, error) { return "", io.EOF }}
	if got := eof.Serve(context.Background(), request(t, "x")).Reply; got.Kind != wire.ReplyOK || string(got.Value) != "null" {
		t.Errorf("end of input: got %+v; want ok null", got)
	}
	ctrlC := Service{Answer: func(context.Context, string, string) (string, error) { return "", ErrInterrupted }}
	if got := ctrlC.Serve(context.Background(), request(t, "x")).Reply; got.Code != CodeInterrupted {
		t.Errorf("interrupted at the prompt: got %+v; want %s", got, CodeInterrupted)
	}
}
