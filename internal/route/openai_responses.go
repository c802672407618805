package route

import (
	"context"
	"fmt"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// openAIResponses is an openai-responses route: the Responses API, streamed, stateless
// (store false, no previous response), every request carrying the whole conversation.
type openAIResponses struct {
	cfg    Config
	client openai.Client
}

func newOpenAIResponses(cfg Config) *openAIResponses {
	return &openAIResponses{cfg: cfg, client: openai.NewClient(openAIOptions(cfg)...)}
}

// Params builds the Responses request of req.
func (r *openAIResponses) Params(req Request) responses.ResponseNewParams {
	tools := r.cfg.Tools
	items := make(responses.ResponseInputParam, 0, len(req.Messages)+1)
	if req.Summary != "" {
		items = append(items, responses.ResponseInputItemParamOfMessage(req.Summary, responses.EasyInputMessageRoleDeveloper))
	}
	for _, m := range req.Messages {
		items = append(items, r.cfg.responsesItems(m)...)
		if images := r.cfg.images(m); len(images) > 0 { // as a user message after the output
			parts := make(responses.ResponseInputMessageContentListParam, 0, len(images))
			for _, img := range images {
				part := responses.ResponseInputContentParamOfInputImage(responses.ResponseInputImageDetailAuto)
				part.OfInputImage.ImageURL = openai.String(img.dataURL())
				parts = append(parts, part)
			}
			items = append(items, responses.ResponseInputItemParamOfMessage(parts, responses.EasyInputMessageRoleUser))
		}
	}
	p := responses.ResponseNewParams{
		Model:           shared.ResponsesModel(r.cfg.Model),
		Instructions:    openai.String(r.cfg.system(req)),
		Input:           responses.ResponseNewParamsInputUnion{OfInputItemList: items},
		MaxOutputTokens: openai.Int(r.cfg.MaxOutputTokens),
		Store:           openai.Bool(false),
	}
	if tools {
		p.Tools = []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: ToolName,
			Description: openai.String(ToolDescription), Parameters: ToolParameters(), Strict: openai.Bool(true)}}}
		p.ParallelToolCalls = openai.Bool(false)
	}
	if req.CacheKey != "" && r.cfg.accepts("prompt_cache_key") {
		p.PromptCacheKey = openai.String(req.CacheKey)
	}
	return p
}

// responsesItems are the input items of one message.
func (cfg Config) responsesItems(m Message) []responses.ResponseInputItemUnionParam {
	switch {
	case m.Role == RoleAssistant && m.Call != nil && cfg.Tools:
		var out []responses.ResponseInputItemUnionParam
		if m.Text != "" {
			out = append(out, responses.ResponseInputItemParamOfMessage(m.Text, responses.EasyInputMessageRoleAssistant))
		}
		return append(out, responses.ResponseInputItemParamOfFunctionCall(m.Call.Arguments, m.Call.ID, ToolName))
	case m.Role == RoleAssistant:
		return []responses.ResponseInputItemUnionParam{responses.ResponseInputItemParamOfMessage(m.Text, responses.EasyInputMessageRoleAssistant)}
	case m.Role == RoleTool && cfg.Tools:
		out := responses.ResponseInputItemParamOfFunctionCallOutput(m.Text)
		out.OfFunctionCallOutput.CallID = openai.String(m.CallID)
		return []responses.ResponseInputItemUnionParam{out}
	}
	return []responses.ResponseInputItemUnionParam{responses.ResponseInputItemParamOfMessage(m.Text, responses.EasyInputMessageRoleUser)}
}

// Call makes the call, streamed; the reply is read from the completed response.
func (r *openAIResponses) Call(ctx context.Context, req Request) (Reply, error) {
	p := r.Params(req)
	return retry(ctx, r.cfg, openAIStatus, req.attempts(func(ctx context.Context) (Reply, error) {
		s := r.client.Responses.NewStreaming(ctx, p)
		defer s.Close()
		for s.Next() {
			ev := s.Current()
			switch ev.Type {
			case "response.completed", "response.incomplete":
				reply, err := readResponse(ev.Response.RawJSON())
				return textReply(reply, r.cfg.Tools, req.TextOnly), err
			case "response.output_text.delta":
				req.delta(DeltaText, ev.Delta)
			case "response.function_call_arguments.delta":
				req.delta(DeltaArguments, ev.Delta)
			case "response.failed":
				return Reply{}, fmt.Errorf("route: the response failed: %s", ev.Response.Error.Message)
			case "error":
				return Reply{}, fmt.Errorf("route: stream error %s: %s", ev.Code, ev.Message)
			}
		}
		if err := s.Err(); err != nil {
			return Reply{}, err
		}
		return Reply{}, fmt.Errorf("%w: the stream ended before the response completed", ErrMalformed)
	}))
}

// responseBody is the part of a Responses API response a reply is read from.
type responseBody struct {
	Model             string `json:"model"`
	Status            string `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Output []struct {
		Type    string `json:"type"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		Arguments string `json:"arguments"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
	} `json:"output"`
	Usage jsontext.Value `json:"usage"`
}

// readResponse reads a reply out of a response object.
func readResponse(raw string) (Reply, error) {
	var body responseBody
	if err := json.Unmarshal([]byte(raw), &body, jsontext.AllowInvalidUTF8(true)); err != nil {
		return Reply{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	reply := Reply{Model: body.Model, StopReason: body.Status}
	if body.IncompleteDetails != nil && body.IncompleteDetails.Reason != "" {
		reply.StopReason = body.Status + ": " + body.IncompleteDetails.Reason
	}
	for _, item := range body.Output {
		switch item.Type {
		case "message":
			for _, c := range item.Content {
				if c.Type == "output_text" {
					reply.Text += c.Text
				}
			}
		case "function_call":
			if reply.Call != nil {
				reply.DroppedCalls++
				continue
			}
			reply.Call = parseCall(item.CallID, item.Name, item.Arguments)
		}
	}
	reply.Usage, reply.RawUsage, reply.UsageProblem = readUsage(body.Usage)
	return reply, nil
}
