// Package tools is kiln's one registry of tools callable from code: Go functions an
// embedder registers and the tools of MCP servers, each with a namespace, a name, a
// description, a JSON Schema for its arguments and a handler. Cells reach them as
// await tools.<namespace>.<name>(**arguments), through the tools.call host request
// (see Service); programs reach them through their bindings.
//
// A call's arguments are validated against the tool's input schema (see Validate) before
// the handler runs; the handler runs under the caller's context, bounded by the
// registry's call timeout. A tool's error, a server that is gone, and a call that timed
// out are told apart by their codes.
package tools

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/textcut"
	"golang.org/x/text/unicode/norm"
)

// Limits of the registry, kiln's own.
const (
	// MaxTools is how many tools one registry holds.
	MaxTools = 1024
	// MaxDescriptionBytes bounds a tool's description; a longer one is cut, with a note.
	MaxDescriptionBytes = 16 << 10
	// MaxSchemaBytes bounds a tool's input schema.
	MaxSchemaBytes = 64 << 10
	// MaxCatalogBytes bounds the catalog a generation loads (see Payload).
	MaxCatalogBytes = 8 << 20
	// MaxIdentifierBytes bounds a namespace and a tool's name.
	MaxIdentifierBytes = 128
	// DefaultCallTimeout bounds one call when the registry sets no timeout of its own.
	DefaultCallTimeout = 60 * time.Second
)

// Errors a caller tells apart with errors.Is.
var (
	// ErrUnknownTool is a call of a tool the registry does not have.
	ErrUnknownTool = errors.New("tools: no such tool")
	// ErrInvalidArguments is a call whose arguments do not match the tool's schema.
	ErrInvalidArguments = errors.New("tools: invalid arguments")
	// ErrUnavailable is a tool whose source cannot answer: its server failed to start,
	// died, broke the protocol, or sent a message over the bounds.
	ErrUnavailable = errors.New("tools: tool unavailable")
	// ErrTimeout is a call that did not finish within the call timeout.
	ErrTimeout = errors.New("tools: call timed out")
	// ErrInvalidTool is a tool that cannot be registered.
	ErrInvalidTool = errors.New("tools: invalid tool")
)

// Handler performs one call: arguments is a JSON object already validated against the
// tool's input schema; the result is one JSON value. Any error other than one wrapping
// ErrUnavailable or ErrTimeout is the tool's own, and its message is what code sees.
type Handler func(ctx context.Context, arguments jsontext.Value) (jsontext.Value, error)

// Tool is one tool.
type Tool struct {
	Namespace   string         // a Python identifier: tools.<Namespace>
	Name        string         // the tool's own name; code calls it by Attr(Name)
	Description string         // what the callable's __doc__ says first
	InputSchema jsontext.Value // a JSON Schema object for the arguments; empty accepts any object
	Handler     Handler
}

// entry is a registered tool with what the registry derived from it.
type entry struct {
	Tool
	attr   string // the Python attribute it is reached by
	schema any    // InputSchema decoded; nil accepts any object
}

// Registry holds tools. Add them all before the first call: a registry in use is only
// read, and is safe for concurrent calls.
type Registry struct {
	timeout time.Duration
	tools   map[string]*entry // by namespace + "." + name
	attrs   map[string]bool   // namespace + "." + attr, taken
	order   []*entry
}

// New returns an empty registry whose calls each last at most timeout (zero means
// DefaultCallTimeout).
func New(timeout time.Duration) *Registry {
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	return &Registry{timeout: timeout, tools: map[string]*entry{}, attrs: map[string]bool{}}
}

// Timeout is how long one call may last.
func (r *Registry) Timeout() time.Duration { return r.timeout }

// Len is how many tools the registry holds.
func (r *Registry) Len() int { return len(r.order) }

// Add registers t. Its namespace must be a Python identifier; its name, mapped to an
// attribute (see Attr), must not collide with another tool's in the namespace.
func (r *Registry) Add(t Tool) error {
	switch {
	case !ValidNamespace(t.Namespace):
		return fmt.Errorf("%w: namespace %q is not a Python identifier of at most %d bytes", ErrInvalidTool, t.Namespace, MaxIdentifierBytes)
	case t.Name == "" || len(t.Name) > MaxIdentifierBytes:
		return fmt.Errorf("%w: %s: a tool's name has 1 to %d bytes", ErrInvalidTool, t.Namespace, MaxIdentifierBytes)
	case t.Handler == nil:
		return fmt.Errorf("%w: %s.%s has no handler", ErrInvalidTool, t.Namespace, t.Name)
	case len(t.InputSchema) > MaxSchemaBytes:
		return fmt.Errorf("%w: %s.%s: the input schema is %d bytes, over %d", ErrInvalidTool, t.Namespace, t.Name, len(t.InputSchema), MaxSchemaBytes)
	case len(r.order) >= MaxTools:
		return fmt.Errorf("%w: %s.%s: a registry holds at most %d tools", ErrInvalidTool, t.Namespace, t.Name, MaxTools)
	}
	key := t.Namespace + "." + t.Name
	e := &entry{Tool: t, attr: Attr(t.Name)}
	if _, dup := r.tools[key]; dup || r.attrs[t.Namespace+"."+e.attr] {
		return fmt.Errorf("%w: %s.%s: the namespace already has a tool called %s", ErrInvalidTool, t.Namespace, t.Name, e.attr)
	}
	if len(t.InputSchema) > 0 {
		if err := json.Unmarshal(t.InputSchema, &e.schema); err != nil {
			return fmt.Errorf("%w: %s.%s: the input schema: %w", ErrInvalidTool, t.Namespace, t.Name, err)
		}
		if _, ok := e.schema.(map[string]any); !ok {
			return fmt.Errorf("%w: %s.%s: the input schema is not an object", ErrInvalidTool, t.Namespace, t.Name)
		}
	}
	e.Description = cutDescription(t.Description)
	r.tools[key] = e
	r.attrs[t.Namespace+"."+e.attr] = true
	r.order = append(r.order, e)
	return nil
}

// cutDescription bounds a description to MaxDescriptionBytes, saying it was cut.
func cutDescription(s string) string {
	const note = "\n[kiln: description cut]"
	if len(s) <= MaxDescriptionBytes {
		return s
	}
	cut, _ := textcut.Prefix(s, MaxDescriptionBytes-len(note))
	return cut + note
}

// Namespaces are the registry's namespaces, sorted.
func (r *Registry) Namespaces() []string {
	var ns []string
	for _, e := range r.order {
		if !slices.Contains(ns, e.Namespace) {
			ns = append(ns, e.Namespace)
		}
	}
	slices.Sort(ns)
	return ns
}

// Call validates arguments (a JSON object; empty means {}) against the tool's schema and
// runs its handler under ctx, for at most the registry's timeout.
func (r *Registry) Call(ctx context.Context, namespace, name string, arguments jsontext.Value) (jsontext.Value, error) {
	e := r.tools[namespace+"."+name]
	if e == nil {
		return nil, fmt.Errorf("%w: %s.%s", ErrUnknownTool, namespace, name)
	}
	if len(arguments) == 0 {
		arguments = jsontext.Value("{}")
	}
	var args any
	if err := json.Unmarshal(arguments, &args); err != nil {
		return nil, fmt.Errorf("%w: %s.%s: %w", ErrInvalidArguments, namespace, name, err)
	}
	if _, ok := args.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: %s.%s: the arguments are not an object", ErrInvalidArguments, namespace, name)
	}
	if e.schema != nil {
		if err := Validate(e.schema, args); err != nil {
			return nil, fmt.Errorf("%w: %s.%s: %w", ErrInvalidArguments, namespace, name, err)
		}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, r.timeout, ErrTimeout)
	defer cancel()
	value, err := e.Handler(ctx, arguments)
	if err != nil && errors.Is(context.Cause(ctx), ErrTimeout) {
		err = fmt.Errorf("%w: %s.%s took over %v", ErrTimeout, namespace, name, r.timeout)
	}
	if err != nil {
		return nil, err
	}
	if len(value) == 0 {
		value = jsontext.Value("null")
	}
	return value, nil
}

// Entry is one tool as cell code sees it: the catalog a generation loads.
type Entry struct {
	Namespace   string         `json:"namespace"`
	Name        string         `json:"name"`
	Attr        string         `json:"attr"`
	Description string         `json:"description"`
	InputSchema jsontext.Value `json:"input_schema,omitempty"`
}

// Catalog is the registry's tools in the order they were added.
func (r *Registry) Catalog() []Entry {
	out := make([]Entry, 0, len(r.order))
	for _, e := range r.order {
		out = append(out, Entry{Namespace: e.Namespace, Name: e.Name, Attr: e.attr,
			Description: e.Description, InputSchema: e.InputSchema})
	}
	return out
}

// Payload is the catalog as the file a workbench generation loads (--tools), or nil for
// an empty registry.
func (r *Registry) Payload() ([]byte, error) {
	if r == nil || len(r.order) == 0 {
		return nil, nil
	}
	data, err := json.Marshal(map[string]any{"tools": r.Catalog()}, json.Deterministic(true))
	if err != nil {
		return nil, fmt.Errorf("tools: encoding the catalog: %w", err)
	}
	if len(data) > MaxCatalogBytes {
		return nil, fmt.Errorf("%w: the catalog of %d tools is %d bytes, over %d", ErrInvalidTool, len(r.order), len(data), MaxCatalogBytes)
	}
	return data, nil
}

// ValidNamespace reports whether s can be a namespace: a Python identifier that is not a
// keyword, of ASCII letters, digits and underscores, not starting with an underscore.
func ValidNamespace(s string) bool {
	if s == "" || len(s) > MaxIdentifierBytes || s[0] == '_' || keyword(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !identByte(s[i], i == 0) {
			return false
		}
	}
	return true
}

// Attr is the Python attribute a tool called name is reached by: name in the form Python
// gives an identifier in source (NFKC), with every character that cannot be in an
// identifier replaced by "_", "_" before a leading digit, and "_" after a keyword.
// "get-sum" is get_sum, "class" is class_, "été" stays été.
func Attr(name string) string {
	var b strings.Builder
	first := true
	for _, r := range norm.NFKC.String(name) {
		switch {
		case first && unicode.IsDigit(r):
			b.WriteByte('_')
			b.WriteRune(r)
		case identRune(r, first):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		first = false
	}
	s := b.String()
	if keyword(s) {
		s += "_"
	}
	return s
}

// identByte reports whether c can be in an ASCII identifier (first: begin one).
func identByte(c byte, first bool) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

// identRune reports whether r can be in a Python identifier (first: begin one): a letter
// or an underscore, and after the first also a digit, a combining mark or a connector.
// Python allows a few more (Other_ID_Start and the like); those become "_".
func identRune(r rune, first bool) bool {
	if r < utf8.RuneSelf {
		return identByte(byte(r), first)
	}
	if unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) {
		return true
	}
	return !first && unicode.In(r, unicode.Mn, unicode.Mc, unicode.Nd, unicode.Pc)
}

// keyword reports whether s is a Python keyword (or a soft keyword that names nothing).
func keyword(s string) bool {
	switch s {
	case "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
		"continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
		"if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise",
		"return", "try", "while", "with", "yield":
		return true
	}
	return false
}
