// Package usage reads what a model request cost from the usage object its route (model
// provider) sent back, in whichever shape that route speaks, and never invents a number.
//
// Four shapes are read, each from exactly the members its routes send:
//
//   - openai-chat (OpenAI chat completions and the routes that copy it, OpenRouter
//     among them): prompt_tokens, completion_tokens, total_tokens,
//     prompt_tokens_details.cached_tokens, and cache_write_tokens under
//     prompt_tokens_details or at the top level.
//   - deepseek: the openai-chat members plus prompt_cache_hit_tokens (the cached prompt
//     tokens) and prompt_cache_miss_tokens (the uncached ones, as the route reports them).
//   - openai-responses (the OpenAI Responses API): input_tokens, output_tokens,
//     total_tokens, input_tokens_details.cached_tokens, and cache_write_tokens under
//     input_tokens_details or at the top level.
//   - anthropic (the Anthropic Messages API): input_tokens, output_tokens,
//     cache_read_input_tokens and cache_creation_input_tokens. Anthropic's input_tokens
//     counts only the prompt tokens neither read from nor written to the cache, so it is
//     kept as [Usage.UncachedUnwrittenPromptTokens], never as the prompt total.
//
// The shape is recognised from the member names present, whatever their values:
// prompt_tokens, completion_tokens, prompt_tokens_details, prompt_cache_hit_tokens and
// prompt_cache_miss_tokens belong to the chat shapes, and input_tokens, output_tokens,
// input_tokens_details, cache_read_input_tokens and cache_creation_input_tokens to the
// input shapes. An object naming members of both is refused as ambiguous, and one naming
// neither is refused as unrecognised. Among the chat shapes, prompt_cache_hit_tokens or
// prompt_cache_miss_tokens makes it deepseek, otherwise openai-chat; among the input
// shapes, cache_read_input_tokens or cache_creation_input_tokens makes it anthropic,
// otherwise openai-responses. An Anthropic object carrying neither cache member is
// therefore read as openai-responses; Anthropic names both on its responses.
//
// A count the route did not report is nil, distinct from a reported zero: a member that
// is absent or null is not a report. Where a shape names two members for one count (for
// example deepseek's prompt_cache_hit_tokens and prompt_tokens_details.cached_tokens), they
// must agree. Members the shape does not read are ignored, since routes add their own, but
// the whole object must be valid JSON without duplicate member names at any depth.
//
// [Parse] records only what the route said. [Usage.WithDerived] adds the counts kiln
// computes, each marked [Count.Derived]. A [Profile] states which prompt-cache request
// options a route accepts, and [Profile.Strip] removes the ones it does not.
package usage

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/textcut"
)

// The shapes [Parse] recognises, as recorded in [Usage.Shape].
const (
	ShapeOpenAIChat      = "openai-chat"
	ShapeOpenAIResponses = "openai-responses"
	ShapeDeepSeek        = "deepseek"
	ShapeAnthropic       = "anthropic"
)

// Count is one token count: its value, and whether kiln computed it from other counts
// (Derived) rather than reading it from the route.
type Count struct {
	Value   int64 `json:"value"`
	Derived bool  `json:"derived,omitzero"`
}

// Usage is what one response said it cost. A nil field is a measurement the route did not
// report — distinct from a reported zero.
type Usage struct {
	// Shape is the shape the usage object was read in: one of the Shape constants.
	Shape string `json:"shape"`
	// PromptTokens is the whole prompt, cached and cache-written tokens included.
	PromptTokens *Count `json:"prompt_tokens,omitzero"`
	// CompletionTokens is the output, reasoning tokens included.
	CompletionTokens *Count `json:"completion_tokens,omitzero"`
	// TotalTokens is the prompt and the output together.
	TotalTokens *Count `json:"total_tokens,omitzero"`
	// CachedPromptTokens is the prompt tokens read from the route's cache.
	CachedPromptTokens *Count `json:"cached_prompt_tokens,omitzero"`
	// CacheWriteTokens is the prompt tokens written to the route's cache.
	CacheWriteTokens *Count `json:"cache_write_tokens,omitzero"`
	// UncachedPromptTokens is the prompt tokens not read from the cache (cache-written
	// ones included): PromptTokens - CachedPromptTokens.
	UncachedPromptTokens *Count `json:"uncached_prompt_tokens,omitzero"`
	// UncachedUnwrittenPromptTokens is the prompt tokens neither read from nor written to
	// the cache, as Anthropic reports them in input_tokens; no other shape reports it.
	UncachedUnwrittenPromptTokens *Count `json:"uncached_unwritten_prompt_tokens,omitzero"`
}

// Parse reads a response's usage object (the value of its "usage" member), recognising
// the shape from the members present as the package documentation describes. It refuses
// (error naming the member) a count that is not a non-negative integer — a string, a
// fraction, an exponent, a negative number or one beyond int64 — an object it recognises
// no shape in, duplicate members, and JSON that is not one valid object. Parse never
// derives a count: every non-nil count it returns was reported by the route.
func Parse(raw []byte) (Usage, error) {
	top, err := object(raw, "")
	if err != nil {
		return Usage{}, err
	}
	shape, err := recognise(top)
	if err != nil {
		return Usage{}, err
	}
	r := &reader{top: top}
	u := r.read(shape)
	if r.err != nil {
		return Usage{}, r.err
	}
	return u, nil
}

// The members that place an object among the chat shapes or the input shapes.
var (
	chatMembers  = []string{"prompt_tokens", "completion_tokens", "prompt_tokens_details", "prompt_cache_hit_tokens", "prompt_cache_miss_tokens"}
	inputMembers = []string{"input_tokens", "output_tokens", "input_tokens_details", "cache_read_input_tokens", "cache_creation_input_tokens"}
)

// recognise names the shape of a usage object from its member names.
func recognise(top map[string]jsontext.Value) (string, error) {
	chat, input := present(top, chatMembers...), present(top, inputMembers...)
	switch {
	case chat != "" && input != "":
		return "", fmt.Errorf("usage: ambiguous shape: %s is a chat member, %s an input member", chat, input)
	case chat != "":
		if present(top, "prompt_cache_hit_tokens", "prompt_cache_miss_tokens") != "" {
			return ShapeDeepSeek, nil
		}
		return ShapeOpenAIChat, nil
	case input != "":
		if present(top, "cache_read_input_tokens", "cache_creation_input_tokens") != "" {
			return ShapeAnthropic, nil
		}
		return ShapeOpenAIResponses, nil
	}
	return "", fmt.Errorf("usage: no recognised shape: none of %s is present",
		strings.Join(slices.Concat(chatMembers, inputMembers), ", "))
}

// present returns the first of names that top has a member for, or "".
func present(top map[string]jsontext.Value, names ...string) string {
	for _, name := range names {
		if _, ok := top[name]; ok {
			return name
		}
	}
	return ""
}

// reader reads counts out of a usage object, keeping the first error it meets; after
// that, every count it returns is nil.
type reader struct {
	top map[string]jsontext.Value
	err error
}

// read reads the counts of the given shape.
func (r *reader) read(shape string) Usage {
	u := Usage{Shape: shape}
	switch shape {
	case ShapeOpenAIChat:
		u.PromptTokens = r.count("prompt_tokens")
		u.CompletionTokens = r.count("completion_tokens")
		u.TotalTokens = r.count("total_tokens")
		u.CachedPromptTokens = r.count("prompt_tokens_details.cached_tokens")
		u.CacheWriteTokens = r.count("prompt_tokens_details.cache_write_tokens", "cache_write_tokens")
	case ShapeDeepSeek:
		u.PromptTokens = r.count("prompt_tokens")
		u.CompletionTokens = r.count("completion_tokens")
		u.TotalTokens = r.count("total_tokens")
		u.CachedPromptTokens = r.count("prompt_cache_hit_tokens", "prompt_tokens_details.cached_tokens")
		u.CacheWriteTokens = r.count("prompt_tokens_details.cache_write_tokens", "cache_write_tokens")
		u.UncachedPromptTokens = r.count("prompt_cache_miss_tokens")
	case ShapeOpenAIResponses:
		u.PromptTokens = r.count("input_tokens")
		u.CompletionTokens = r.count("output_tokens")
		u.TotalTokens = r.count("total_tokens")
		u.CachedPromptTokens = r.count("input_tokens_details.cached_tokens")
		u.CacheWriteTokens = r.count("input_tokens_details.cache_write_tokens", "cache_write_tokens")
	case ShapeAnthropic:
		u.UncachedUnwrittenPromptTokens = r.count("input_tokens")
		u.CompletionTokens = r.count("output_tokens")
		u.CachedPromptTokens = r.count("cache_read_input_tokens")
		u.CacheWriteTokens = r.count("cache_creation_input_tokens")
	}
	return u
}

// count reads the count reported at any of paths, nil if none reports it. Where several
// report it, they must agree.
func (r *reader) count(paths ...string) *Count {
	var got *Count
	var from string
	for _, path := range paths {
		c := r.one(path)
		if c == nil {
			continue
		}
		if got != nil && c.Value != got.Value {
			r.fail(fmt.Errorf("usage: %s is %d but %s is %d", from, got.Value, path, c.Value))
			return nil
		}
		got, from = c, path
	}
	return got
}

// one reads the count at path: a top-level member, or "object.member" for a member of
// a nested object.
func (r *reader) one(path string) *Count {
	if r.err != nil {
		return nil
	}
	parent, member, nested := strings.Cut(path, ".")
	v := r.top[parent]
	if nested && reported(v) {
		m, err := object(v, parent)
		if err != nil {
			r.fail(err)
			return nil
		}
		v = m[member]
	}
	c, err := count(v, path)
	if err != nil {
		r.fail(err)
	}
	return c
}

// fail keeps err unless an earlier error was kept.
func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// reported says whether v is a report: present and not null.
func reported(v jsontext.Value) bool {
	k := v.Kind()
	return k != 0 && k != 'n'
}

// count reads v, the member at path, as a token count: nil when v is absent or null,
// otherwise a JSON integer of only digits that fits in an int64.
func count(v jsontext.Value, path string) (*Count, error) {
	if !reported(v) {
		return nil, nil
	}
	if v.Kind() == '0' {
		text := string(bytes.TrimSpace(v))
		if n, err := strconv.ParseInt(text, 10, 64); err == nil && text[0] != '-' {
			return &Count{Value: n}, nil
		}
	}
	return nil, fmt.Errorf("usage: %s: want a non-negative integer, got %s", path, shown(v))
}

// object reads v, the value at path ("" for the usage object itself), as a JSON object.
func object(v jsontext.Value, path string) (map[string]jsontext.Value, error) {
	if v.Kind() != '{' {
		return nil, fmt.Errorf("%s: want an object, got %s", prefix(path), shown(v))
	}
	var m map[string]jsontext.Value
	if err := json.Unmarshal(v, &m); err != nil {
		var serr *jsontext.SyntacticError
		if errors.As(err, &serr) && errors.Is(serr.Err, jsontext.ErrDuplicateName) {
			at := strings.Join(slices.Collect(serr.JSONPointer.Tokens()), ".")
			if path != "" {
				at = path + "." + at
			}
			return nil, fmt.Errorf("%s: duplicate member", prefix(at))
		}
		return nil, fmt.Errorf("%s: %w", prefix(path), err)
	}
	return m, nil
}

// prefix begins an error about the member at path ("" for the usage object itself).
func prefix(path string) string {
	if path == "" {
		return "usage"
	}
	return "usage: " + path
}

// maxShown bounds how much of a refused value an error message quotes, in bytes.
const maxShown = 40

// shown is v as an error message quotes it: trimmed, and cut short if long.
func shown(v jsontext.Value) string {
	text := bytes.TrimSpace(v)
	if len(text) == 0 {
		return "nothing"
	}
	head, cut := textcut.Prefix(text, maxShown)
	if cut {
		return string(head) + "..."
	}
	return string(head)
}

// WithDerived returns u with the counts kiln may compute filled in and marked Derived.
// It fills only nil counts, never changing one the route reported, and only from counts
// that are all present; a result that would be negative or overflow is left nil. In order:
//
//   - PromptTokens = UncachedUnwrittenPromptTokens + CachedPromptTokens + CacheWriteTokens
//     (Anthropic's prompt total);
//   - UncachedPromptTokens = PromptTokens - CachedPromptTokens;
//   - TotalTokens = PromptTokens + CompletionTokens.
//
// Later steps use counts derived by earlier ones. u itself is not modified.
func (u Usage) WithDerived() Usage {
	if u.PromptTokens == nil {
		u.PromptTokens = sum(u.UncachedUnwrittenPromptTokens, u.CachedPromptTokens, u.CacheWriteTokens)
	}
	if u.UncachedPromptTokens == nil {
		u.UncachedPromptTokens = difference(u.PromptTokens, u.CachedPromptTokens)
	}
	if u.TotalTokens == nil {
		u.TotalTokens = sum(u.PromptTokens, u.CompletionTokens)
	}
	return u
}

// sum is the derived sum of counts, or nil if any is nil or the sum overflows.
func sum(counts ...*Count) *Count {
	var total int64
	for _, c := range counts {
		if c == nil || c.Value > math.MaxInt64-total {
			return nil
		}
		total += c.Value
	}
	return &Count{Value: total, Derived: true}
}

// difference is the derived a - b, or nil if either is nil or b exceeds a.
func difference(a, b *Count) *Count {
	if a == nil || b == nil || b.Value > a.Value {
		return nil
	}
	return &Count{Value: a.Value - b.Value, Derived: true}
}

// Profile is a route's declared capability: which cache fields a request to it may carry.
type Profile struct {
	// Name names the route.
	Name string `json:"name"`
	// CacheFields lists the cache request options the route accepts, e.g.
	// "prompt_cache_key", "prompt_cache_retention", "prompt_cache_options".
	CacheFields []string `json:"cache_fields"`
}

// strippedFields are the cache request options a request carries only to a route whose
// profile lists them.
var strippedFields = []string{"prompt_cache_retention", "prompt_cache_options"}

// Strip returns options without the cache fields the profile does not accept.
// prompt_cache_retention and prompt_cache_options are always removed unless listed in
// CacheFields; other options pass through unchanged. options is not modified; the result
// is a new map (nil for nil options) sharing its values with options.
func (p Profile) Strip(options map[string]jsontext.Value) map[string]jsontext.Value {
	out := maps.Clone(options)
	for _, field := range strippedFields {
		if !slices.Contains(p.CacheFields, field) {
			delete(out, field)
		}
	}
	return out
}
