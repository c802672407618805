package wire

import (
	"github.com/go-json-experiment/json/jsontext"
)

// Version is the protocol version every envelope carries.
const Version = 1

// Limits on what a worker may send back, from the specification.
const (
	// MaxCodeBytes bounds an execute's cell source, in UTF-8 bytes.
	MaxCodeBytes = 262144
	// MaxOutputBytes bounds the text of a cell's output records together.
	MaxOutputBytes = 65536
	// MaxOutputRecords bounds how many output records a cell returns.
	MaxOutputRecords = 256
	// MaxErrorBytes bounds a cell's error text.
	MaxErrorBytes = 65536
	// MaxExceptionTypeBytes bounds the type name of a cell's structured exception, a
	// limit of kiln's extension.
	MaxExceptionTypeBytes = 1024
)

// Worker roles, as hello carries them.
const (
	RoleWorkbench = "workbench"
	RoleHooks     = "hooks"
)

// Cell statuses.
const (
	StatusOK          = "ok"
	StatusError       = "error"
	StatusYielded     = "yielded"
	StatusInterrupted = "interrupted"
)

// Output streams.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamResult = "result"
	// StreamDisplay marks a record of display data (kiln's extension of v1).
	StreamDisplay = "display"
)

// Result kinds of a completed message.
const (
	ResultCell   = "cell"
	ResultHook   = "hook"
	ResultFailed = "failed"
	// ResultCompletion answers a Complete (kiln's extension of v1).
	ResultCompletion = "completion"
)

// Limits of a completion, kiln's own.
const (
	// MaxCompleteBytes bounds the text a Complete asks about.
	MaxCompleteBytes = 4096
	// MaxMatches bounds the matches of a completion, and MaxMatchBytes each one.
	MaxMatches    = 1000
	MaxMatchBytes = 1024
)

// Reply kinds of a host_reply.
const (
	ReplyOK    = "ok"
	ReplyError = "error"
)

// Envelope is one frame's payload: the identity of the generation it belongs to, and a
// message.
type Envelope struct {
	SessionID  string
	Generation string
	Message    Message
}

// Message is one kind of the vocabulary.
type Message interface {
	// Kind is the message's "kind" on the wire.
	Kind() string
}

// Hello is a worker's first frame: it proves the worker holds the startup token.
type Hello struct {
	Token    string   `json:"token"`
	Role     string   `json:"role"`
	Revision *string  `json:"revision"`
	Slots    []string `json:"slots"`
}

// Execute asks a workbench to run one cell.
type Execute struct {
	ID   string `json:"id"`
	Code string `json:"code"`
}

// The policy slots a hooks worker serves, sorted as its hello lists them.
const (
	SlotAttentionPlan   = "attention.plan"
	SlotDeliveryReview  = "delivery.review"
	SlotExecutionReview = "execution.review"
)

// Slots are the slots every release names and every hooks worker's hello lists.
var Slots = []string{SlotAttentionPlan, SlotDeliveryReview}

// OptionalSlots are the slots a release may name beside Slots: a hooks worker's hello
// lists, sorted, Slots and those of these its release names.
var OptionalSlots = []string{SlotExecutionReview}

// Invoke asks a hooks worker to decide one slot.
type Invoke struct {
	ID    string         `json:"id"`
	Slot  string         `json:"slot"`
	Input jsontext.Value `json:"input"`
}

// HostRequest is a call that cell code makes to the host.
type HostRequest struct {
	ID          string         `json:"id"`
	ExecutionID string         `json:"execution_id"`
	Request     jsontext.Value `json:"request"`
}

// HostReply answers one HostRequest, repeating its identity.
type HostReply struct {
	ID          string `json:"id"`
	ExecutionID string `json:"execution_id"`
	Reply       Reply  `json:"reply"`
}

// Reply is a host reply's outcome: Kind ReplyOK with a Value, or ReplyError with a Code
// and a Message.
type Reply struct {
	Kind    string
	Value   jsontext.Value
	Code    string
	Message string
}

// OutputChunk is text a running cell wrote to stdout or stderr, sent as it is produced
// (kiln's extension of v1, "output"). The chunks of a cell, merged by stream, are
// exactly the stdout and stderr records of its completion.
type OutputChunk struct {
	ExecutionID string `json:"execution_id"`
	Stream      string `json:"stream"` // StreamStdout or StreamStderr
	Text        string `json:"text"`
}

// Display is one rich display of a running cell (kiln's extension of v1, "display"): a
// MIME bundle, each value a string, text/plain always present, image types base64.
// Dropped counts the bundle's MIME items the worker left out to stay in the bounds.
type Display struct {
	ExecutionID string            `json:"execution_id"`
	Data        map[string]string `json:"data"`
	Dropped     int64             `json:"dropped"`
}

// Display bounds, per cell (kiln's extension of v1).
const (
	// MaxDisplayBytes bounds the MIME values of a cell's displays together.
	MaxDisplayBytes = 8 << 20
	// MaxDisplayItems bounds how many displays a cell sends.
	MaxDisplayItems = 32
)

// The MIME types a display may carry; DisplayBinary ones are standard base64.
const (
	MIMEPlain    = "text/plain"
	MIMEHTML     = "text/html"
	MIMEMarkdown = "text/markdown"
	MIMELatex    = "text/latex"
	MIMEJSON     = "application/json"
	MIMESVG      = "image/svg+xml"
	MIMEPNG      = "image/png"
	MIMEJPEG     = "image/jpeg"
)

// DisplayMIME lists the MIME types a display may carry, and whether each is base64.
func DisplayMIME(mime string) (known, binary bool) {
	switch mime {
	case MIMEPlain, MIMEHTML, MIMEMarkdown, MIMELatex, MIMEJSON, MIMESVG:
		return true, false
	case MIMEPNG, MIMEJPEG:
		return true, true
	}
	return false, false
}

// Exception is what a cell raised, in parts (kiln's extension of v1): its type's name,
// its value as str() gives it, and its traceback as the error text shows it.
type Exception struct {
	Type      string `json:"type"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// Completed ends one operation.
type Completed struct {
	ID     string `json:"id"`
	Result Result `json:"result"`
}

// Result is how an operation ended. Kind selects the fields that apply: ResultCell uses
// Status, Output, TruncatedBytes, Error (nil when the cell raised nothing) and
// Exception (nil when the cell raised nothing, or the worker did not say it in parts;
// the member is optional on the wire); ResultHook uses Value; ResultFailed uses Error;
// ResultCompletion uses Matches.
type Result struct {
	Kind           string
	Status         string
	Output         []Output
	TruncatedBytes int64
	Error          *string
	Exception      *Exception
	Value          jsontext.Value
	Matches        []string
}

// Output is one record of a cell's output: Text for stdout, stderr and result; Data, a
// MIME bundle, for StreamDisplay. In a completion a StreamDisplay record is a display's
// place, with no Data: the host fills it with the Display message streamed there.
type Output struct {
	Stream string            `json:"stream"`
	Text   string            `json:"text,omitempty"`
	Data   map[string]string `json:"data,omitempty"`
}

// Complete asks an idle workbench for the names that complete Text in its namespace,
// as Python's own REPL completes them (kiln's extension of v1, "complete"). It is
// answered by a Completed whose result is a ResultCompletion.
type Complete struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// Interrupt asks a worker to stop one operation.
type Interrupt struct {
	ID string `json:"id"`
}

// Shutdown asks a worker to exit cleanly.
type Shutdown struct{}

// Kind implements Message.
func (Hello) Kind() string { return "hello" }

// Kind implements Message.
func (Execute) Kind() string { return "execute" }

// Kind implements Message.
func (Invoke) Kind() string { return "invoke" }

// Kind implements Message.
func (HostRequest) Kind() string { return "host_request" }

// Kind implements Message.
func (HostReply) Kind() string { return "host_reply" }

// Kind implements Message.
func (Completed) Kind() string { return "completed" }

// Kind implements Message.
func (OutputChunk) Kind() string { return "output" }

// Kind implements Message.
func (Complete) Kind() string { return "complete" }

// Kind implements Message.
func (Display) Kind() string { return "display" }

// Kind implements Message.
func (Interrupt) Kind() string { return "interrupt" }

// Kind implements Message.
func (Shutdown) Kind() string { return "shutdown" }
