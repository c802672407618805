package program

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/kilnrt/kiln/internal/lossless"
)

// The frame vocabulary of docs/programs.md. The json tags are the wire names: a
// field tagged omitempty is optional, any other is required; every frame also
// requires "type". FieldSets reads these tags, and the mirror test compares them with
// the Python side's declarations. Host frames are written by AppendBoot, AppendRun and
// AppendReply; child frames are read by ParseChildFrame, which builds them field by
// field and never lets a field it does not know ride along.

// Frame type names, as the "type" member spells them.
const (
	TypeBoot    = "boot"
	TypeRun     = "run"
	TypeReply   = "reply"
	TypeBootAck = "boot-ack"
	TypeCall    = "call"
	TypeLog     = "log"
	TypeDone    = "done"
)

// Boot is the host's first frame: the child's limits, budgets and bindings.
type Boot struct {
	CPUSeconds        int             `json:"cpuSeconds"`
	AddressSpaceBytes int64           `json:"addressSpaceBytes"`
	MaxLogBytes       int             `json:"maxLogBytes"`
	MaxValueBytes     int             `json:"maxValueBytes"`
	Namespaces        []NamespaceDecl `json:"namespaces"`
}

// NamespaceDecl declares one proxy global of the child and the binding names it
// serves: the part of a Namespace that crosses the wire.
type NamespaceDecl struct {
	Global     string      `json:"global"`
	Names      []string    `json:"names"`
	ErrorClass *ErrorClass `json:"errorClass,omitempty"`
}

// ErrorClass is the exception class a namespace's rejected calls raise in the child:
// Name(message), with the binding's name set on its MemberNameProperty attribute.
type ErrorClass struct {
	Name               string `json:"name"`
	MemberNameProperty string `json:"memberNameProperty"`
}

// Run carries the program; the host sends it once, only after boot-ack.
type Run struct {
	Program string `json:"program"`
}

// Reply answers the call with the same id: OK with a Value, or not OK with a Message.
type Reply struct {
	ID      int64          `json:"id"`
	OK      bool           `json:"ok"`
	Value   lossless.Value `json:"value,omitempty"`
	Message string         `json:"message,omitempty"`
}

// A Frame is a child frame as ParseChildFrame rebuilds it: BootAck, Call, Log or Done.
type Frame interface{ frame() }

// BootAck says the child applied its limits and built its bindings.
type BootAck struct{}

// Call asks the host to run the binding Global.Name with Args. ID is the number the
// child sent, finite and not −0; the host answers it only if it equals the next id
// it expects.
type Call struct {
	ID     float64        `json:"id"`
	Global string         `json:"global"`
	Name   string         `json:"name"`
	Args   lossless.Value `json:"args"`
}

// Log is one line of the program's output, or with Open a piece of one that the next
// log frame continues. Truncated marks the child's own truncation notice: its text
// means nothing and no log follows it.
type Log struct {
	Text      string `json:"text"`
	Truncated bool   `json:"truncated,omitempty"`
	Open      bool   `json:"open,omitempty"`
}

// Done is the program's completion: Error if it failed, else Value (nil is null;
// HasValue says whether the frame carried one).
type Done struct {
	Value    lossless.Value `json:"value,omitempty"`
	Error    *DoneError     `json:"error,omitempty"`
	HasValue bool           `json:"-"`
}

// DoneError is why a program failed, as the child saw it.
type DoneError struct {
	Kind    Status `json:"kind"`
	Message string `json:"message"`
}

func (BootAck) frame() {}
func (Call) frame()    {}
func (Log) frame()     {}
func (Done) frame()    {}

// Fields is one frame's wire field names, each list sorted.
type Fields struct {
	Required []string `json:"required"`
	Optional []string `json:"optional"`
}

// FieldSets returns the field names of each frame and nested object of the
// vocabulary, by the names kiln.protocol.field_sets uses: boot, namespace, errorClass,
// run, reply, boot-ack, call, log, done, done.error.
func FieldSets() map[string]Fields {
	type entry struct {
		name  string
		t     reflect.Type
		frame bool // a top-level frame, which also requires "type"
	}
	out := make(map[string]Fields)
	for _, e := range []entry{
		{TypeBoot, reflect.TypeFor[Boot](), true},
		{"namespace", reflect.TypeFor[NamespaceDecl](), false},
		{"errorClass", reflect.TypeFor[ErrorClass](), false},
		{TypeRun, reflect.TypeFor[Run](), true},
		{TypeReply, reflect.TypeFor[Reply](), true},
		{TypeBootAck, reflect.TypeFor[BootAck](), true},
		{TypeCall, reflect.TypeFor[Call](), true},
		{TypeLog, reflect.TypeFor[Log](), true},
		{TypeDone, reflect.TypeFor[Done](), true},
		{"done.error", reflect.TypeFor[DoneError](), false},
	} {
		f := Fields{Required: []string{}, Optional: []string{}}
		if e.frame {
			f.Required = append(f.Required, "type")
		}
		for sf := range e.t.Fields() {
			name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
			switch {
			case name == "-" || name == "":
			case opts == "omitempty":
				f.Optional = append(f.Optional, name)
			default:
				f.Required = append(f.Required, name)
			}
		}
		slices.Sort(f.Required)
		slices.Sort(f.Optional)
		out[e.name] = f
	}
	return out
}

// --- host → child ---------------------------------------------------------------

// AppendBoot appends the boot frame b, newline included, to dst.
func AppendBoot(dst []byte, b Boot) []byte {
	spaces := make(lossless.Array, len(b.Namespaces))
	for i, ns := range b.Namespaces {
		names := make(lossless.Array, len(ns.Names))
		for j, n := range ns.Names {
			names[j] = lossless.String(n)
		}
		m := []lossless.Member{{Key: "global", Value: lossless.String(ns.Global)}, {Key: "names", Value: names}}
		if ec := ns.ErrorClass; ec != nil {
			m = append(m, lossless.Member{Key: "errorClass", Value: lossless.NewObject(
				lossless.Member{Key: "name", Value: lossless.String(ec.Name)},
				lossless.Member{Key: "memberNameProperty", Value: lossless.String(ec.MemberNameProperty)},
			)})
		}
		spaces[i] = lossless.NewObject(m...)
	}
	return appendFrame(dst, lossless.NewObject(
		lossless.Member{Key: "type", Value: lossless.String(TypeBoot)},
		lossless.Member{Key: "cpuSeconds", Value: lossless.Number(b.CPUSeconds)},
		lossless.Member{Key: "addressSpaceBytes", Value: lossless.Number(b.AddressSpaceBytes)},
		lossless.Member{Key: "maxLogBytes", Value: lossless.Number(b.MaxLogBytes)},
		lossless.Member{Key: "maxValueBytes", Value: lossless.Number(b.MaxValueBytes)},
		lossless.Member{Key: "namespaces", Value: spaces},
	))
}

// AppendRun appends the run frame for program, newline included, to dst.
func AppendRun(dst []byte, program string) []byte {
	return appendFrame(dst, lossless.NewObject(
		lossless.Member{Key: "type", Value: lossless.String(TypeRun)},
		lossless.Member{Key: "program", Value: lossless.String(program)},
	))
}

// AppendReply appends the reply frame r, newline included, to dst: with its Value if
// OK, else with its Message. The value is encoded without recursion, however deep.
func AppendReply(dst []byte, r Reply) []byte {
	m := []lossless.Member{
		{Key: "type", Value: lossless.String(TypeReply)},
		{Key: "id", Value: lossless.Number(r.ID)},
		{Key: "ok", Value: lossless.Bool(r.OK)},
	}
	if r.OK {
		m = append(m, lossless.Member{Key: "value", Value: r.Value})
		if dst == nil {
			dst = make([]byte, 0, lossless.Size(r.Value)+replyOverhead) // one buffer, not doublings of it
		}
	} else {
		m = append(m, lossless.Member{Key: "message", Value: lossless.String(r.Message)})
	}
	return appendFrame(dst, lossless.NewObject(m...))
}

// replyOverhead is what a reply frame holds beside its value: its other members and
// the newline, the largest id included.
const replyOverhead = 64

// appendReplySized is AppendReply of an OK reply whose value's Size is size, known.
func appendReplySized(r Reply, size int) []byte {
	return AppendReply(make([]byte, 0, size+replyOverhead), r)
}

func appendFrame(dst []byte, frame lossless.Object) []byte {
	return append(lossless.Append(dst, frame), '\n')
}

// --- child → host ---------------------------------------------------------------

// ErrJunk is the error, matched with errors.Is, of a child frame that
// ParseChildFrame drops. Its text names the rule broken, never the frame's content.
var ErrJunk = errors.New("program: junk frame")

func junk(reason string) error { return fmt.Errorf("%w: %s", ErrJunk, reason) }

// ParseChildFrame reads one line from fd 3, its newline removed, as a child frame:
// the line must be valid UTF-8, hold no integer token a double would round
// (lossless.UnsafeInteger), parse as one JSON object, and pass the rules of its type.
// The frame returned is built anew from the fields its type declares, each checked;
// anything else in the line is ignored. Rules beyond a field's JSON type:
//
//   - log: truncated and open are kept only when literally true;
//   - call: id a finite number, not −0; args present (null allowed) and free of NaN,
//     infinities and −0;
//   - done: error, when present, an object with a string message and a kind of
//     exception, invalid-output or output-limit (error:null drops the frame); value is
//     not checked here.
//
// Any other line gives an error wrapping ErrJunk.
func ParseChildFrame(line []byte) (Frame, error) { return parseChildFrame(line, nil) }

// parseChildFrame is ParseChildFrame, given up with lossless.ErrStopped once stop is
// closed.
func parseChildFrame(line []byte, stop <-chan struct{}) (Frame, error) {
	if !utf8.Valid(line) {
		return nil, junk("invalid UTF-8")
	}
	if lossless.UnsafeInteger(line) {
		return nil, junk("an integer a double would round")
	}
	v, err := lossless.DecodeUntil(line, stop)
	if errors.Is(err, lossless.ErrStopped) {
		return nil, err
	}
	if err != nil {
		return nil, junk("not JSON")
	}
	obj, ok := v.(lossless.Object)
	if !ok {
		return nil, junk("not an object")
	}
	typ, ok := str(obj, "type")
	if !ok {
		return nil, junk("no string type")
	}
	switch typ {
	case TypeBootAck:
		return BootAck{}, nil
	case TypeLog:
		text, ok := str(obj, "text")
		if !ok {
			return nil, junk("log without a string text")
		}
		return Log{Text: text, Truncated: isTrue(obj, "truncated"), Open: isTrue(obj, "open")}, nil
	case TypeCall:
		return parseCall(obj)
	case TypeDone:
		return parseDone(obj)
	}
	return nil, junk("unknown type")
}

func parseCall(obj lossless.Object) (Frame, error) {
	idv, _ := obj.Get("id")
	id, ok := idv.(lossless.Number)
	if !ok || math.IsNaN(float64(id)) || math.IsInf(float64(id), 0) || id == 0 && math.Signbit(float64(id)) {
		return nil, junk("call id not a finite number")
	}
	global, ok1 := str(obj, "global")
	name, ok2 := str(obj, "name")
	if !ok1 || !ok2 {
		return nil, junk("call without a string global and name")
	}
	args, ok := obj.Get("args")
	if !ok {
		return nil, junk("call without args")
	}
	if lossless.Lossy(args) {
		return nil, junk("call args not lossless")
	}
	return Call{ID: float64(id), Global: global, Name: name, Args: args}, nil
}

func parseDone(obj lossless.Object) (Frame, error) {
	if ev, ok := obj.Get("error"); ok {
		e, ok := ev.(lossless.Object)
		if !ok {
			return nil, junk("done error not an object")
		}
		msg, ok := str(e, "message")
		if !ok {
			return nil, junk("done error without a string message")
		}
		kind, _ := str(e, "kind")
		switch Status(kind) {
		case StatusException, StatusInvalidOutput, StatusOutputLimit:
		default:
			return nil, junk("done error of an unknown kind")
		}
		return Done{Error: &DoneError{Kind: Status(kind), Message: msg}}, nil
	}
	v, ok := obj.Get("value")
	return Done{Value: v, HasValue: ok}, nil
}

// str returns obj's member key if it is a string.
func str(obj lossless.Object, key string) (string, bool) {
	v, _ := obj.Get(key)
	s, ok := v.(lossless.String)
	return string(s), ok
}

// isTrue reports whether obj's member key is literally true.
func isTrue(obj lossless.Object, key string) bool {
	v, _ := obj.Get(key)
	b, ok := v.(lossless.Bool)
	return ok && bool(b)
}
