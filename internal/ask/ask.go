// Package ask answers a cell's input(): the runtime.input host request, which the
// worker makes with the prompt and blocks on until someone answers.
package ask

import (
	"context"
	"errors"
	"io"

	"github.com/kilnrt/kiln/internal/host"
)

// Method is the host request input() makes: {"method":"runtime.input","prompt":…}.
const Method = "runtime.input"

// Limits of kiln's own, in UTF-8 bytes.
const (
	MaxPromptBytes = 65536
	MaxAnswerBytes = 65536
)

// Error codes of the replies, beside the router's.
const (
	// CodeNoInput is an input() nobody can answer; the cell's input() raises EOFError
	// with the message.
	CodeNoInput = "no_input"
	// CodeAnswerTooLong is an answer over MaxAnswerBytes.
	CodeAnswerTooLong = "answer_too_long"
	// CodeInterrupted is an input() the one answering interrupted (Ctrl-C at its
	// prompt); the cell's input() raises KeyboardInterrupt, as Python's own does.
	CodeInterrupted = "input_interrupted"
)

// ErrInterrupted is what an Answerer returns when the one answering interrupted
// instead: Ctrl-C at the prompt.
var ErrInterrupted = errors.New("ask: interrupted at the prompt")

// NoOne is the message of an input() with no one to answer it.
const NoOne = "no one to answer input() here"

// Answerer answers one input(): the line typed, without its newline, io.EOF at the end
// of the input, or ErrInterrupted. ctx ends when the cell does.
type Answerer func(ctx context.Context, cellID, prompt string) (string, error)

// Service serves Method with Answer; a nil Answer answers no one.
type Service struct {
	Answer Answerer
}

// Serve asks for one line. The request and its reply, prompt and answer, are recorded
// as every request is.
func (s Service) Serve(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		Prompt string `json:"prompt"`
	}
	if err := req.Decode(&p); err != nil {
		return host.Reply(host.Error(host.CodeInvalidRequest, "runtime.input takes a prompt string: %v", err))
	}
	if len(p.Prompt) > MaxPromptBytes {
		return host.Reply(host.Error(host.CodeInvalidRequest, "the prompt is %d bytes, over %d", len(p.Prompt), MaxPromptBytes))
	}
	if s.Answer == nil {
		return host.Reply(host.Error(CodeNoInput, NoOne))
	}
	text, err := s.Answer(ctx, req.ExecutionID, p.Prompt)
	switch {
	case errors.Is(err, io.EOF):
		return host.Reply(host.OK(nil))
	case errors.Is(err, ErrInterrupted):
		return host.Reply(host.Error(CodeInterrupted, "interrupted at the prompt"))
	case err != nil:
		return host.Reply(host.Error(CodeNoInput, "no answer: %v", err))
	case len(text) > MaxAnswerBytes:
		return host.Reply(host.Error(CodeAnswerTooLong, "the answer is %d bytes, over %d", len(text), MaxAnswerBytes))
	}
	return host.Reply(host.OK(text))
}
