package route

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// openAIChat is an openai-chat route: OpenAI chat completions, streamed or whole.
type openAIChat struct {
	cfg    Config
	client openai.Client
}

func newOpenAIChat(cfg Config) *openAIChat {
	return &openAIChat{cfg: cfg, client: openai.NewClient(openAIOptions(cfg)...)}
}

// openAIOptions are an OpenAI client's options for cfg: its own retries off (retry
// makes them) and nothing taken from the environment that cfg does not say.
func openAIOptions(cfg Config) []option.RequestOption {
	opts := []option.RequestOption{option.WithHTTPClient(cfg.HTTPClient), option.WithMaxRetries(0),
		option.WithAPIKey(cfg.APIKey)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	return opts
}

// openAIStatus is the HTTP status and headers of an OpenAI error answer, and its
// message and code, which the SDK's error text leaves out.
func openAIStatus(err error) (int, http.Header, string) {
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		return 0, nil, ""
	}
	var h http.Header
	if apiErr.Response != nil {
		h = apiErr.Response.Header
	}
	said := apiErr.Message
	if apiErr.Code != "" {
		said += " (code " + apiErr.Code + ")"
	}
	if said == "" {
		said = apiErr.RawJSON()
	}
	return apiErr.StatusCode, h, said
}

// Params builds the chat completion request of req.
func (r *openAIChat) Params(req Request) openai.ChatCompletionNewParams {
	tools := r.cfg.Tools
	msgs := make([]openai.ChatCompletionMessageParamUnion, 0, len(req.Messages)+2)
	msgs = append(msgs, openai.SystemMessage(r.cfg.system(req)))
	if req.Summary != "" {
		msgs = append(msgs, openai.SystemMessage(req.Summary))
	}
	for _, m := range req.Messages {
		msgs = append(msgs, r.cfg.chatMessage(m))
		if images := r.cfg.images(m); len(images) > 0 { // a tool message holds text alone
			parts := make([]openai.ChatCompletionContentPartUnionParam, 0, len(images))
			for _, img := range images {
				parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: img.dataURL()}))
			}
			msgs = append(msgs, openai.UserMessage(parts))
		}
	}
	p := openai.ChatCompletionNewParams{
		Model:               shared.ChatModel(r.cfg.Model),
		Messages:            msgs,
		MaxCompletionTokens: openai.Int(r.cfg.MaxOutputTokens),
	}
	if tools {
		p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: ToolName, Description: openai.String(ToolDescription), Parameters: ToolParameters()})}
		p.ParallelToolCalls = openai.Bool(false)
	}
	if req.CacheKey != "" && r.cfg.accepts("prompt_cache_key") {
		p.PromptCacheKey = openai.String(req.CacheKey)
	}
	if r.cfg.Stream {
		p.StreamOptions.IncludeUsage = openai.Bool(true)
	}
	return p
}

// chatMessage is one message as chat completions carry it. On a route without tools a
// call is the assistant's text (which holds its block) and a result is a user message.
func (cfg Config) chatMessage(m Message) openai.ChatCompletionMessageParamUnion {
	switch {
	case m.Role == RoleAssistant && m.Call != nil && cfg.Tools:
		a := openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
			OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: m.Call.ID,
				Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: ToolName, Arguments: m.Call.Arguments}}}}}
		if m.Text != "" {
			a.Content.OfString = openai.String(m.Text)
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}
	case m.Role == RoleAssistant:
		return openai.AssistantMessage(m.Text)
	case m.Role == RoleTool && cfg.Tools:
		return openai.ToolMessage(m.Text, m.CallID)
	}
	return openai.UserMessage(m.Text)
}

// Call makes the call, streamed unless the route says otherwise.
func (r *openAIChat) Call(ctx context.Context, req Request) (Reply, error) {
	p := r.Params(req)
	return retry(ctx, r.cfg, openAIStatus, req.attempts(func(ctx context.Context) (Reply, error) {
		var reply Reply
		var err error
		if r.cfg.Stream {
			reply, err = r.stream(ctx, p, req)
		} else {
			reply, err = r.whole(ctx, p)
		}
		return textReply(reply, r.cfg.Tools, req.TextOnly), err
	}))
}

func (r *openAIChat) whole(ctx context.Context, p openai.ChatCompletionNewParams) (Reply, error) {
	res, err := r.client.Chat.Completions.New(ctx, p)
	if err != nil {
		return Reply{}, err
	}
	var reply Reply
	reply.Model = res.Model
	if len(res.Choices) == 0 {
		return Reply{}, fmt.Errorf("%w: no choices", ErrMalformed)
	}
	ch := res.Choices[0]
	reply.Text, reply.StopReason = ch.Message.Content, ch.FinishReason
	for i, tc := range ch.Message.ToolCalls {
		if i > 0 {
			reply.DroppedCalls++
			continue
		}
		reply.Call = parseCall(tc.ID, tc.Function.Name, tc.Function.Arguments)
	}
	reply.Usage, reply.RawUsage, reply.UsageProblem = readUsage(member(res.RawJSON(), "usage"))
	return reply, nil
}

// maxStreamedCalls is the highest tool call index a streamed reply may use.
const maxStreamedCalls = 64

// streamedCall gathers one tool call's streamed parts.
type streamedCall struct {
	id, name string
	args     strings.Builder
}

func (r *openAIChat) stream(ctx context.Context, p openai.ChatCompletionNewParams, req Request) (Reply, error) {
	s := r.client.Chat.Completions.NewStreaming(ctx, p)
	defer s.Close()
	var reply Reply
	var text strings.Builder
	var calls []*streamedCall
	for s.Next() {
		chunk := s.Current()
		if chunk.Model != "" {
			reply.Model = chunk.Model
		}
		if raw := member(chunk.RawJSON(), "usage"); raw.Kind() == '{' {
			reply.Usage, reply.RawUsage, reply.UsageProblem = readUsage(raw)
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			text.WriteString(ch.Delta.Content)
			req.delta(DeltaText, ch.Delta.Content)
			if ch.FinishReason != "" {
				reply.StopReason = ch.FinishReason
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Index < 0 || tc.Index > maxStreamedCalls {
					return Reply{}, fmt.Errorf("%w: tool call index %d", ErrMalformed, tc.Index)
				}
				for int(tc.Index) >= len(calls) {
					calls = append(calls, &streamedCall{})
				}
				c := calls[tc.Index]
				if tc.ID != "" {
					c.id = tc.ID
				}
				if tc.Function.Name != "" {
					c.name = tc.Function.Name
				}
				c.args.WriteString(tc.Function.Arguments)
				req.delta(DeltaArguments, tc.Function.Arguments)
			}
		}
	}
	if err := s.Err(); err != nil {
		return Reply{}, err
	}
	reply.Text = text.String()
	for i, c := range calls {
		if i > 0 {
			reply.DroppedCalls++
			continue
		}
		reply.Call = parseCall(c.id, c.name, c.args.String())
	}
	return reply, nil
}

// member is the raw value of a top-level member of a JSON object, nil when absent.
func member(raw string, name string) jsontext.Value {
	dec := jsontext.NewDecoder(strings.NewReader(raw), jsontext.AllowInvalidUTF8(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil
	}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil
		}
		key := tok.String()
		v, err := dec.ReadValue()
		if err != nil {
			return nil
		}
		if key == name {
			return v
		}
	}
	return nil
}
