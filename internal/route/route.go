// Package route calls the models an agent runs on. A route is one configured model
// endpoint of a kind: openai-chat (OpenAI chat completions and the services that copy
// it), openai-responses (the OpenAI Responses API), anthropic (the Anthropic Messages
// API), or script (replies read from a JSONL file, for deterministic tests).
//
// Every kind takes the same [Request] — the system text, an optional fold summary and the
// conversation since it — and gives the same [Reply]: the model's text, its one call of
// the python tool (or the first fenced python block, on a route without tools), why it
// stopped, and its usage read from the raw response JSON by package usage, so that an
// absent count stays absent. The request a kind builds from a conversation is a pure
// function of it: the same messages give the same bytes, and a conversation that grew by
// appended messages gives a request whose messages are the earlier ones, byte for byte,
// and then the new ones.
//
// A call is retried on 408, 409, 429 and 5xx answers and on transport failures, at most
// [MaxAttempts] times in all, waiting the answer's Retry-After (at most [MaxRetryAfter])
// or an exponential backoff from [Config.Backoff]. Each attempt has the route's timeout.
// A response body is read through a limit ([MaxResponseBytes]), so no answer makes the
// host hold unbounded memory.
package route

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/textcut"
	"github.com/kilnrt/kiln/internal/usage"
)

// Route kinds.
const (
	KindOpenAIChat      = "openai-chat"
	KindOpenAIResponses = "openai-responses"
	KindAnthropic       = "anthropic"
	KindScript          = "script"
)

// The one tool a model is given.
const (
	ToolName        = "python"
	ToolDescription = "Run Python code as the next cell of your persistent workbench. " +
		"The namespace persists between cells; top-level await works. " +
		"Speak to the operator with await runtime.request(\"local.send\", text=...); " +
		"end your turn with await runtime.wait(seconds or None)."
)

// ToolParameters is the python tool's JSON schema: one string argument, code.
func ToolParameters() map[string]any {
	return map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"code": map[string]any{"type": "string", "description": "the Python source of the cell"}},
		"required":             []string{"code"},
		"additionalProperties": false,
	}
}

// Limits and defaults of a call.
const (
	// MaxAttempts bounds the attempts of one call, the first included.
	MaxAttempts = 3
	// MaxRetryAfter bounds how long a Retry-After answer is waited for.
	MaxRetryAfter = 30 * time.Second
	// MaxBackoff bounds the exponential backoff between attempts.
	MaxBackoff = 8 * time.Second
	// DefaultBackoff is the first backoff when the route names none.
	DefaultBackoff = 500 * time.Millisecond
	// DefaultTimeout bounds one attempt when the route names no timeout.
	DefaultTimeout = 5 * time.Minute
	// DefaultMaxOutputTokens bounds a reply when the route names no bound.
	DefaultMaxOutputTokens = 8192
	// MaxResponseBytes bounds the bytes of one response body read.
	MaxResponseBytes = 16 << 20
	// MaxCodeBytes is the spec's bound on a cell's source.
	MaxCodeBytes = 262144
)

// Errors a caller tells apart with errors.Is.
var (
	// ErrResponseTooLarge is a response body over MaxResponseBytes.
	ErrResponseTooLarge = errors.New("route: response over the size limit")
	// ErrScriptExhausted is a call to a script route past its last reply.
	ErrScriptExhausted = errors.New("route: the script has no reply for this call")
	// ErrMalformed is a response the route's wire format does not allow.
	ErrMalformed = errors.New("route: malformed response")
	// ErrRedirect is a redirect to another origin, which a route never follows: it
	// would send the conversation and the route's key to a host nobody configured.
	ErrRedirect = errors.New("route: redirected to another origin")
	// ErrContextLength is a request the model refused as longer than its context window.
	ErrContextLength = errors.New("route: the request is longer than the model's context window")
)

// Roles of a conversation's messages.
const (
	RoleUser      = "user"      // an input, an observation, a nudge
	RoleAssistant = "assistant" // the model's text and its python call
	RoleTool      = "tool"      // what running the call's cell gave
)

// Message is one message of a conversation.
type Message struct {
	Role string `json:"role"`
	// Text is a user message's text, an assistant's text, or a tool result's text.
	Text string `json:"text,omitzero"`
	// Call is an assistant's call of the python tool.
	Call *Call `json:"call,omitzero"`
	// CallID is the call a tool result answers.
	CallID string `json:"call_id,omitzero"`
	// Images are a tool result's images, which a route that takes images sends beside
	// its text (Info.Images); a route that does not, drops them.
	Images []Image `json:"images,omitzero"`
}

// Image is one image a message carries: its media type, one of ImageTypes, and its
// bytes.
type Image struct {
	MIMEType string `json:"mime_type"`
	Data     []byte `json:"data"`
}

// ImageTypes are the media types of the images a route sends; every route kind that
// takes images takes these.
var ImageTypes = []string{"image/png", "image/jpeg"}

// images are the images of m a request carries: none unless the route takes images,
// and only those of ImageTypes.
func (c Config) images(m Message) []Image {
	if !c.Images || len(m.Images) == 0 {
		return nil
	}
	out := make([]Image, 0, len(m.Images))
	for _, img := range m.Images {
		if slices.Contains(ImageTypes, img.MIMEType) {
			out = append(out, img)
		}
	}
	return out
}

// dataURL is img as a data: URL, as the OpenAI routes send an image.
func (img Image) dataURL() string {
	return "data:" + img.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
}

// Call is one call of the python tool.
type Call struct {
	ID string `json:"id"`
	// Arguments is the arguments JSON exactly as the model sent it.
	Arguments string `json:"arguments"`
	// Code is the code argument; empty when Problem says why there is none.
	Code string `json:"code"`
	// Problem says why Arguments gave no code.
	Problem string `json:"problem,omitzero"`
}

// TextProtocol is added to the system text of a route without tools: the model learns
// how to act there from it, as a route with tools learns it from the tool.
const TextProtocol = "[kiln] How you act here: write Python in one fenced block per reply, opened by ```python on its own line " +
	"and closed by ``` on its own line. The block runs as the next cell of your persistent workbench " +
	"(the namespace persists; top-level await works) and what it printed comes back as the next message. " +
	"Only the first block of a reply runs. Text outside the block is never delivered to anyone. " +
	"Speak to the operator with await runtime.request(\"local.send\", text=...); " +
	"end your turn with await runtime.wait(seconds or None)."

// Request is what one model call sends.
type Request struct {
	// System is the pinned instruction header.
	System string
	// Summary is the latest fold's summary; "" when the session has not folded.
	Summary string
	// Messages are the conversation since the fold.
	Messages []Message
	// CacheKey is sent as prompt_cache_key where the route accepts it: the session.
	CacheKey string
	// TextOnly asks for text alone, as a fold's summary call does: the reply's text is
	// taken whole and any call in it is ignored. The request is the same as a step's,
	// tools included, so that it shares the steps' cached prefix.
	TextOnly bool
	// OnDelta, when set, is told the reply's pieces as a streaming route receives them
	// (see the Delta kinds), on the calling goroutine; it must not block. The Reply stays
	// the whole answer: the pieces are for watching a call, never for its record.
	OnDelta func(kind, text string)
}

// Delta kinds a call tells Request.OnDelta.
const (
	DeltaText      = "text"      // a piece of the model's text
	DeltaArguments = "arguments" // a piece of the python call's arguments, JSON as it streams
	DeltaRestart   = "restart"   // another attempt of the call begins: the pieces before it are void
)

// delta tells req.OnDelta a piece of kind, if there is one to tell.
func (req Request) delta(kind, text string) {
	if req.OnDelta != nil && (text != "" || kind == DeltaRestart) {
		req.OnDelta(kind, text)
	}
}

// attempts is attempt telling req.OnDelta, before each attempt after the first, that
// the pieces before it are void.
func (req Request) attempts(attempt attemptFunc) attemptFunc {
	n := 0
	return func(ctx context.Context) (Reply, error) {
		if n++; n > 1 {
			req.delta(DeltaRestart, "")
		}
		return attempt(ctx)
	}
}

// Info is what a route says of itself to the loop that calls it.
type Info struct {
	// Tools says the route gives the model the python tool; without it, code comes as a
	// fenced block.
	Tools bool
	// MaxOutputTokens bounds a reply: the most output one call is charged where its
	// route reports none.
	MaxOutputTokens int64
	// Images says the route sends a tool result's images to the model.
	Images bool
}

// Describer is a route that describes itself; every route of this package does.
type Describer interface {
	Describe() Info
}

// Describe says what c is; a client that does not describe itself is taken to have
// tools and DefaultMaxOutputTokens.
func Describe(c Client) Info {
	if d, ok := c.(Describer); ok {
		return d.Describe()
	}
	return Info{Tools: true, MaxOutputTokens: DefaultMaxOutputTokens}
}

func (c Config) info() Info {
	return Info{Tools: c.Tools, MaxOutputTokens: c.MaxOutputTokens, Images: c.Images}
}

// Describe implements Describer.
func (r *openAIChat) Describe() Info { return r.cfg.info() }

// Describe implements Describer.
func (r *openAIResponses) Describe() Info { return r.cfg.info() }

// Describe implements Describer.
func (r *anthropicRoute) Describe() Info { return r.cfg.info() }

// system is the system text a request carries: the header, and the protocol on a route
// without tools.
func (c Config) system(req Request) string {
	if c.Tools {
		return req.System
	}
	return req.System + "\n\n" + TextProtocol
}

// Reply is what one model call gave.
type Reply struct {
	// Text is the model's text; on a route without tools, cut after the first fenced block.
	Text string
	// Call is the model's python call, or nil for a text-only answer.
	Call *Call
	// StopReason is the route's own word for why the reply ended.
	StopReason string
	// Usage is the usage object read, nil when the response carried none.
	Usage *usage.Usage
	// RawUsage is the usage object as the route sent it.
	RawUsage jsontext.Value
	// Model is the model the route says answered.
	Model string
	// DroppedCalls counts further tool calls the model made, which a step does not run.
	DroppedCalls int
	// UsageProblem says why a usage object the route sent was not read; Usage is then
	// nil and RawUsage holds the object as sent, made valid UTF-8.
	UsageProblem string
	// Failures are the attempts that failed before this reply.
	Failures []Failure
}

// Failure is one failed attempt of a call.
type Failure struct {
	Status int    `json:"status,omitzero"`
	Error  string `json:"error"`
	// RetryAfterNs is the wait before the next attempt, in nanoseconds: an integer, which
	// the JSON codec writes as it is (it has no default form for a time.Duration).
	RetryAfterNs int64 `json:"retry_after_ns,omitzero"`
}

// CallError is a call that failed: every attempt's failure, in order.
type CallError struct {
	Failures []Failure
	Err      error // the last attempt's error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("route: call failed after %d attempts: %s", len(e.Failures), errorText(e.Err))
}

// MaxErrorBytes bounds the text of an attempt's error as a route reports and records it:
// the server chooses that text, and an SDK may copy a whole body into it.
const MaxErrorBytes = 4 << 10

// errorText is err's text, made valid UTF-8 and cut to MaxErrorBytes.
func errorText(err error) string {
	return textcut.Ellipsis(Valid(err.Error()), MaxErrorBytes)
}

// Valid is s with each run of bytes that is not UTF-8 replaced by U+FFFD: what a server
// or a model sends is kept, never dropped, and recorded as valid text.
func Valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// valid makes every text of r valid UTF-8.
func (r Reply) valid() Reply {
	r.Text, r.StopReason, r.Model, r.UsageProblem = Valid(r.Text), Valid(r.StopReason), Valid(r.Model), Valid(r.UsageProblem)
	if !utf8.Valid(r.RawUsage) {
		r.RawUsage = jsontext.Value(Valid(string(r.RawUsage)))
	}
	if r.Call != nil {
		c := *r.Call
		c.ID, c.Arguments, c.Code, c.Problem = Valid(c.ID), Valid(c.Arguments), Valid(c.Code), Valid(c.Problem)
		r.Call = &c
	}
	return r
}

func (e *CallError) Unwrap() error { return e.Err }

// Client is a route: it makes model calls.
type Client interface {
	// Call sends req and returns the model's reply, retrying as the package describes.
	// Cancelling ctx aborts the call.
	Call(ctx context.Context, req Request) (Reply, error)
}

// Config configures a route.
type Config struct {
	Name    string
	Kind    string
	BaseURL string
	Model   string
	APIKey  string
	// Tools false gives no tool: code comes as a fenced python block in the text.
	Tools bool
	// Stream false asks an openai-chat route for whole responses.
	Stream bool
	// Images says the route sends the images of tool results (not a script route's).
	Images bool
	// Cache lists the cache request options the route accepts.
	Cache []string
	// Timeout bounds one attempt; 0 is DefaultTimeout.
	Timeout time.Duration
	// Backoff is the wait before the first retry without Retry-After; 0 is DefaultBackoff.
	Backoff time.Duration
	// MaxOutputTokens bounds a reply; 0 is DefaultMaxOutputTokens.
	MaxOutputTokens int64
	// Script is a script route's JSONL file.
	Script string
	// HTTPClient makes the HTTP requests; nil is a client of its own.
	HTTPClient *http.Client
}

// New returns the client of cfg's kind.
func New(cfg Config) (Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxOutputTokens <= 0 {
		cfg.MaxOutputTokens = DefaultMaxOutputTokens
	}
	base := cfg.HTTPClient
	if base == nil {
		base = &http.Client{}
	}
	transport := base.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	hc := *base
	hc.Transport = limitTransport{next: transport}
	hc.CheckRedirect = sameOrigin
	cfg.HTTPClient = &hc
	switch cfg.Kind {
	case KindOpenAIChat:
		return newOpenAIChat(cfg), nil
	case KindOpenAIResponses:
		return newOpenAIResponses(cfg), nil
	case KindAnthropic:
		return newAnthropic(cfg), nil
	case KindScript:
		return OpenScript(cfg.Script)
	}
	return nil, fmt.Errorf("route: %s: unknown kind %q", cfg.Name, cfg.Kind)
}

// maxRedirects bounds the redirects one request follows, all within its origin.
const maxRedirects = 10

// sameOrigin follows a redirect only within the origin (scheme, host and port) of the
// request the route made.
func sameOrigin(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	if req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
		return fmt.Errorf("%w: %s://%s to %s://%s", ErrRedirect, first.Scheme, first.Host, req.URL.Scheme, req.URL.Host)
	}
	if len(via) >= maxRedirects {
		return fmt.Errorf("route: stopped after %d redirects", maxRedirects)
	}
	return nil
}

// accepts says whether the route declared the cache option.
func (c Config) accepts(option string) bool {
	for _, o := range c.Cache {
		if o == option {
			return true
		}
	}
	return false
}

// limitTransport reads every response body through MaxResponseBytes.
type limitTransport struct{ next http.RoundTripper }

func (t limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if err == nil && res.Body != nil {
		res.Body = &limitedBody{rc: res.Body, left: MaxResponseBytes}
	}
	return res, err
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, ErrResponseTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// attemptFunc makes one attempt of a call.
type attemptFunc func(ctx context.Context) (Reply, error)

// statusOf is an attempt's HTTP status and response headers, when the failure is an
// answer of the route, and what the answer said where err's text does not say it.
type statusOf func(err error) (code int, header http.Header, said string)

// retry makes attempts until one succeeds, one fails for good, MaxAttempts are made, or
// ctx ends.
func retry(ctx context.Context, cfg Config, status statusOf, attempt attemptFunc) (Reply, error) {
	var failures []Failure
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		reply, err := attempt(actx)
		cancel()
		if err == nil {
			reply = cut(reply.valid(), cfg.MaxOutputTokens)
			reply.Failures = failures
			return reply, nil
		}
		code, header, said := status(err)
		if said != "" {
			err = fmt.Errorf("%w: %s", err, said)
		}
		if tooLong(err) {
			err = fmt.Errorf("%w: %w", ErrContextLength, err)
		}
		if ctx.Err() != nil {
			return Reply{}, &CallError{Failures: append(failures, Failure{Error: errorText(err)}), Err: ctx.Err()}
		}
		f := Failure{Status: code, Error: errorText(err)}
		wait, again := backoff(cfg.Backoff, n, code, header, err)
		again = again && n < MaxAttempts
		if again { // a wait is recorded only where one follows
			f.RetryAfterNs = wait.Nanoseconds()
		}
		failures = append(failures, f)
		if !again {
			return Reply{}, &CallError{Failures: failures, Err: err}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Reply{}, &CallError{Failures: failures, Err: ctx.Err()}
		case <-t.C:
		}
	}
}

// backoff says whether a failure is retried and after how long: the answer's
// Retry-After (at most MaxRetryAfter) when it has one, else base·2^(n-1) (at most
// MaxBackoff).
func backoff(base time.Duration, n, code int, header http.Header, err error) (time.Duration, bool) {
	switch {
	case errors.Is(err, ErrRedirect) || errors.Is(err, ErrContextLength):
		return 0, false
	case code == 408 || code == 409 || code == 429 || code >= 500:
	case code == 0 && transient(err):
	default:
		return 0, false
	}
	if d, ok := retryAfter(header); ok {
		return min(d, MaxRetryAfter), true
	}
	d := base << (n - 1)
	if d <= 0 || d > MaxBackoff {
		d = MaxBackoff
	}
	return d, true
}

// transient says whether an attempt that got no answer may succeed if repeated: a
// connection that failed, broke, or timed out, or an overloaded stream.
func transient(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) || strings.Contains(err.Error(), "overloaded")
}

// contextLengthWords are what the routes say when a request is over the model's window:
// OpenAI's error code, its message, Anthropic's message, and those of servers that copy
// them.
var contextLengthWords = []string{"context_length_exceeded", "maximum context length", "prompt is too long",
	"context window", "too many tokens"}

// tooLong says whether err is a route's refusal of a request as over the model's window.
func tooLong(err error) bool {
	text := strings.ToLower(err.Error())
	for _, w := range contextLengthWords {
		if strings.Contains(text, w) {
			return true
		}
	}
	return false
}

// Stop reasons that say a reply was cut at its output bound, per route kind.
var cutReasons = []string{"length", "max_tokens", "incomplete: max_output_tokens"}

// cut explains a call whose arguments did not parse because the reply was cut at its
// output bound: the model reads that, not a JSON decoder's complaint.
func cut(r Reply, maxOutput int64) Reply {
	if !slices.Contains(cutReasons, r.StopReason) || r.Call == nil || r.Call.Problem == "" {
		return r
	}
	c := *r.Call
	c.Problem = fmt.Sprintf("the reply was cut at its output bound of %d tokens (stop reason %s) before the code was complete; "+
		"nothing ran. Write a shorter cell, or build the work up over several cells", maxOutput, r.StopReason)
	r.Call = &c
	return r
}

// waitOf is n units, at most MaxRetryAfter: a huge or infinite n must not overflow.
func waitOf(n float64, unit time.Duration) time.Duration {
	if n*float64(unit) >= float64(MaxRetryAfter) {
		return MaxRetryAfter
	}
	return time.Duration(n * float64(unit))
}

// retryAfter reads retry-after-ms, then Retry-After in seconds or as an HTTP date.
func retryAfter(h http.Header) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return waitOf(ms, time.Millisecond), true
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return waitOf(s, time.Second), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

// codeArgs is the python tool's arguments.
type codeArgs struct {
	Code *string `json:"code"`
}

// parseCall reads a python call's arguments; a call whose arguments give no code says
// why in Problem.
func parseCall(id, name, arguments string) *Call {
	arguments = Valid(arguments)
	c := &Call{ID: id, Arguments: arguments}
	if name != ToolName {
		c.Problem = fmt.Sprintf("there is no tool %q; the one tool is %q", name, ToolName)
		return c
	}
	var args codeArgs
	if err := json.Unmarshal([]byte(arguments), &args, json.RejectUnknownMembers(true)); err != nil {
		c.Problem = fmt.Sprintf("the arguments are not {\"code\": string}: %v", err)
		return c
	}
	if args.Code == nil {
		c.Problem = "the arguments give no \"code\" string"
		return c
	}
	if len(*args.Code) > MaxCodeBytes {
		c.Problem = fmt.Sprintf("the code is %d bytes; a cell's source is at most %d", len(*args.Code), MaxCodeBytes)
		return c
	}
	c.Code = *args.Code
	return c
}

// Fence opens and closes a python block on a route without tools.
const (
	fenceOpen  = "```python\n"
	fenceClose = "```"
)

// Fenced cuts text after its first fenced python block and returns the kept text and
// the block's code. Without a complete block, text is kept whole and ok is false.
func Fenced(text string) (kept, code string, ok bool) {
	i := strings.Index(text, fenceOpen)
	if i < 0 {
		return text, "", false
	}
	start := i + len(fenceOpen)
	body := text[start:]
	end := 0
	if !strings.HasPrefix(body, fenceClose) {
		k := strings.Index(body, "\n"+fenceClose)
		if k < 0 {
			return text, "", false
		}
		end = k + 1
	}
	return text[:start+end+len(fenceClose)], body[:end], true
}

// textReply is a reply as a request asked for it: for text alone (textOnly), the text
// whole and no call; otherwise, on a route without tools, its first fenced block as a call.
func textReply(r Reply, tools, textOnly bool) Reply {
	if textOnly {
		r.Call, r.DroppedCalls = nil, 0
		return r
	}
	return fencedReply(r, tools)
}

// fencedReply turns a text reply of a route without tools into one with a call. A block
// opened and not closed by a reply cut at its output bound is a call with a problem.
func fencedReply(r Reply, tools bool) Reply {
	if tools || r.Call != nil {
		return r
	}
	kept, code, ok := Fenced(r.Text)
	if !ok {
		if slices.Contains(cutReasons, r.StopReason) && strings.Contains(r.Text, fenceOpen) {
			r.Call = &Call{Problem: "the python block was not closed"}
		}
		return r
	}
	r.Text = kept
	r.Call = &Call{Code: code}
	if len(code) > MaxCodeBytes {
		r.Call = &Call{Problem: fmt.Sprintf("the code is %d bytes; a cell's source is at most %d", len(code), MaxCodeBytes)}
	}
	return r
}

// readUsage parses a raw usage object; nil raw (absent or null) is no usage. A usage
// object that does not parse is reported (problem) and kept raw: it never throws away the
// reply it came with.
func readUsage(raw jsontext.Value) (u *usage.Usage, kept jsontext.Value, problem string) {
	if k := raw.Kind(); k == 0 || k == 'n' {
		return nil, nil, ""
	}
	parsed, err := usage.Parse(raw)
	if err != nil {
		return nil, raw.Clone(), err.Error()
	}
	return &parsed, raw.Clone(), ""
}
