package route

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/go-json-experiment/json/jsontext"
)

// anthropicRoute is an anthropic route: the Messages API, streamed, with cache_control
// breakpoints on the system block, on the end of the fold summary, and on the last block
// of the conversation. The last one moves as the conversation grows; the others stay.
type anthropicRoute struct {
	cfg    Config
	client anthropic.Client
}

func newAnthropic(cfg Config) *anthropicRoute {
	opts := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0), option.WithAPIKey(cfg.APIKey)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(anthropicBase(cfg.BaseURL)))
	}
	return &anthropicRoute{cfg: cfg, client: anthropic.NewClient(opts...)}
}

// anthropicBase is the base URL the SDK takes: it adds /v1/messages itself, so a base
// given as the API's root with /v1 (as OpenAI's base URLs are) has it taken off.
func anthropicBase(base string) string {
	return strings.TrimSuffix(strings.TrimRight(base, "/"), "/v1")
}

// anthropicStatus is the HTTP status and headers of an Anthropic error answer; the SDK's
// error text has the answer's body already.
func anthropicStatus(err error) (int, http.Header, string) {
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		return apiErr.StatusCode, h, ""
	}
	return 0, nil, ""
}

// breakpoint is a cache breakpoint: the SDK omits a zero CacheControlEphemeralParam,
// so only its constructor gives one that is sent.
func breakpoint() anthropic.CacheControlEphemeralParam {
	return anthropic.NewCacheControlEphemeralParam()
}

// Params builds the Messages request of req. Consecutive messages of one role are one
// message, and a tool result opens the user message it is in, as the API requires.
func (r *anthropicRoute) Params(req Request) anthropic.MessageNewParams {
	tools := r.cfg.Tools
	system := []anthropic.TextBlockParam{{Text: r.cfg.system(req), CacheControl: breakpoint()}}
	if req.Summary != "" {
		system = append(system, anthropic.TextBlockParam{Text: req.Summary, CacheControl: breakpoint()})
	}
	type group struct {
		assistant bool
		blocks    []anthropic.ContentBlockParamUnion
	}
	var groups []group
	for _, m := range req.Messages {
		blocks := r.cfg.anthropicBlocks(m)
		if len(blocks) == 0 {
			continue
		}
		assistant := m.Role == RoleAssistant
		if n := len(groups); n > 0 && groups[n-1].assistant == assistant {
			groups[n-1].blocks = append(groups[n-1].blocks, blocks...)
			continue
		}
		groups = append(groups, group{assistant: assistant, blocks: blocks})
	}
	if n := len(groups); n > 0 {
		last := groups[n-1].blocks[len(groups[n-1].blocks)-1]
		if cc := last.GetCacheControl(); cc != nil {
			*cc = breakpoint()
		}
	}
	msgs := make([]anthropic.MessageParam, len(groups))
	for i, g := range groups {
		if g.assistant {
			msgs[i] = anthropic.NewAssistantMessage(g.blocks...)
		} else {
			msgs[i] = anthropic.NewUserMessage(g.blocks...)
		}
	}
	p := anthropic.MessageNewParams{
		Model:     anthropic.Model(r.cfg.Model),
		MaxTokens: r.cfg.MaxOutputTokens,
		System:    system,
		Messages:  msgs,
	}
	if tools {
		p.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: ToolName,
			Description: anthropic.String(ToolDescription),
			InputSchema: anthropic.ToolInputSchemaParam{Properties: ToolParameters()["properties"], Required: []string{"code"}}}}}
		p.ToolChoice = anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{DisableParallelToolUse: anthropic.Bool(true)}}
	}
	return p
}

// anthropicBlocks are the content blocks of one message.
func (cfg Config) anthropicBlocks(m Message) []anthropic.ContentBlockParamUnion {
	var out []anthropic.ContentBlockParamUnion
	if m.Role == RoleTool && cfg.Tools {
		res := anthropic.ToolResultBlockParam{ToolUseID: m.CallID}
		if m.Text != "" {
			res.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: m.Text}}}
		}
		for _, img := range cfg.images(m) {
			res.Content = append(res.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: anthropicImage(img).OfImage})
		}
		return append(out, anthropic.ContentBlockParamUnion{OfToolResult: &res})
	}
	if m.Text != "" {
		out = append(out, anthropic.NewTextBlock(m.Text))
	}
	for _, img := range cfg.images(m) {
		out = append(out, anthropicImage(img))
	}
	if m.Role == RoleAssistant && m.Call != nil && cfg.Tools {
		out = append(out, anthropic.NewToolUseBlock(m.Call.ID, toolInput(m.Call.Arguments), ToolName))
	}
	return out
}

// anthropicImage is img as an image block, its bytes in base64.
func anthropicImage(img Image) anthropic.ContentBlockParamUnion {
	return anthropic.NewImageBlockBase64(img.MIMEType, base64.StdEncoding.EncodeToString(img.Data))
}

// toolInput is a call's input as the request carries it: the arguments as the model
// sent them when they are a JSON object, else an empty object.
func toolInput(arguments string) json.RawMessage {
	raw := jsontext.Value(arguments)
	if raw.Kind() != '{' || !raw.IsValid() {
		return json.RawMessage("{}")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(arguments)); err != nil {
		return json.RawMessage("{}")
	}
	return buf.Bytes()
}

// Call makes the call, streamed.
func (r *anthropicRoute) Call(ctx context.Context, req Request) (Reply, error) {
	p := r.Params(req)
	return retry(ctx, r.cfg, anthropicStatus, req.attempts(func(ctx context.Context) (Reply, error) {
		reply, err := r.stream(ctx, p, req)
		return textReply(reply, r.cfg.Tools, req.TextOnly), err
	}))
}

// anthropicBlock gathers one streamed content block.
type anthropicBlock struct {
	kind, id, name string
	text           strings.Builder
}

func (r *anthropicRoute) stream(ctx context.Context, p anthropic.MessageNewParams, req Request) (Reply, error) {
	s := r.client.Messages.NewStreaming(ctx, p)
	defer s.Close()
	var reply Reply
	var blocks []*anthropicBlock
	var start, delta jsontext.Value
	stopped := false
	for s.Next() {
		ev := s.Current()
		switch ev.Type {
		case "message_start":
			reply.Model = ev.Message.Model
			start = member(string(member(ev.RawJSON(), "message")), "usage").Clone()
		case "content_block_start":
			if len(blocks) > 256 {
				return Reply{}, fmt.Errorf("%w: over 256 content blocks", ErrMalformed)
			}
			if ev.Index != int64(len(blocks)) {
				return Reply{}, fmt.Errorf("%w: content block %d started as block %d", ErrMalformed, len(blocks), ev.Index)
			}
			blocks = append(blocks, &anthropicBlock{kind: ev.ContentBlock.Type, id: ev.ContentBlock.ID, name: ev.ContentBlock.Name})
			blocks[len(blocks)-1].text.WriteString(ev.ContentBlock.Text)
		case "content_block_delta":
			if ev.Index < 0 || ev.Index >= int64(len(blocks)) {
				return Reply{}, fmt.Errorf("%w: a delta of content block %d, of %d started", ErrMalformed, ev.Index, len(blocks))
			}
			b := blocks[ev.Index] // the block it names, which need not be the latest
			switch ev.Delta.Type {
			case "text_delta":
				b.text.WriteString(ev.Delta.Text)
				req.delta(DeltaText, ev.Delta.Text)
			case "input_json_delta":
				b.text.WriteString(ev.Delta.PartialJSON)
				req.delta(DeltaArguments, ev.Delta.PartialJSON)
			}
		case "message_delta":
			if ev.Delta.StopReason != "" {
				reply.StopReason = string(ev.Delta.StopReason)
			}
			delta = member(ev.RawJSON(), "usage").Clone()
		case "message_stop":
			stopped = true
		}
	}
	if err := s.Err(); err != nil {
		return Reply{}, err
	}
	if !stopped {
		return Reply{}, fmt.Errorf("%w: the stream ended before message_stop", ErrMalformed)
	}
	var text strings.Builder
	for _, b := range blocks {
		switch b.kind {
		case "text":
			text.WriteString(b.text.String())
		case "tool_use":
			if reply.Call != nil {
				reply.DroppedCalls++
				continue
			}
			args := b.text.String()
			if args == "" {
				args = "{}"
			}
			reply.Call = parseCall(b.id, b.name, args)
		}
	}
	reply.Text = text.String()
	merged, err := mergeUsage(start, delta)
	if err != nil {
		reply.UsageProblem = err.Error()
		return reply, nil
	}
	reply.Usage, reply.RawUsage, reply.UsageProblem = readUsage(merged)
	return reply, nil
}

// mergeUsage is the usage of a streamed message: message_start's object, each member
// that message_delta reports (not null) replacing the one it started with.
func mergeUsage(start, delta jsontext.Value) (jsontext.Value, error) {
	if delta.Kind() != '{' {
		return start, nil
	}
	if start.Kind() != '{' {
		return delta, nil
	}
	names, values := []string{}, map[string]jsontext.Value{}
	for _, obj := range []jsontext.Value{start, delta} {
		dec := jsontext.NewDecoder(bytes.NewReader(obj), jsontext.AllowInvalidUTF8(true))
		if _, err := dec.ReadToken(); err != nil {
			return nil, fmt.Errorf("%w: usage: %v", ErrMalformed, err)
		}
		for dec.PeekKind() != '}' {
			tok, err := dec.ReadToken()
			if err != nil {
				return nil, fmt.Errorf("%w: usage: %v", ErrMalformed, err)
			}
			name := tok.String()
			v, err := dec.ReadValue()
			if err != nil {
				return nil, fmt.Errorf("%w: usage: %v", ErrMalformed, err)
			}
			if _, seen := values[name]; !seen {
				names = append(names, name)
			} else if v.Kind() == 'n' {
				continue
			}
			values[name] = v.Clone()
		}
	}
	var buf bytes.Buffer
	enc := jsontext.NewEncoder(&buf)
	_ = enc.WriteToken(jsontext.BeginObject)
	for _, n := range names {
		_ = enc.WriteToken(jsontext.String(n))
		_ = enc.WriteValue(values[n])
	}
	if err := enc.WriteToken(jsontext.EndObject); err != nil {
		return nil, fmt.Errorf("%w: usage: %v", ErrMalformed, err)
	}
	return jsontext.Value(bytes.TrimSpace(buf.Bytes())), nil
}
