package kiln

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/program"
	"github.com/kilnrt/kiln/internal/session"
	"github.com/kilnrt/kiln/internal/tools"
)

// Tool is a Go function that cell code calls as
//
//	await tools.<Namespace>.<Name>(**arguments)
//
// with Description and InputSchema as the callable's __doc__. See docs/tools.md.
type Tool struct {
	// Namespace is a Python identifier, not a keyword, not starting with "_".
	Namespace string
	// Name is the tool's name; a character that cannot be in a Python identifier is "_"
	// in the attribute ("get-sum" is get_sum), and a keyword gets "_" after it.
	Name string
	// Description is what help() shows first (cut at 16 KiB).
	Description string
	// InputSchema is a JSON Schema object for the arguments, checked before Handler
	// runs: type, properties, required, items, enum and additionalProperties are
	// applied; other keywords are ignored. Nil accepts any object.
	InputSchema []byte
	// Handler performs a call: arguments is the JSON object of the keyword arguments;
	// the result is encoded as JSON (a json.RawMessage is taken as it is). An error's
	// message is what the cell's ToolError carries. ctx ends with the cell, or when the
	// call outlasts the tool timeout.
	Handler func(ctx context.Context, arguments []byte) (any, error)
}

// DefaultToolTimeout bounds one tool call when no timeout is given.
const DefaultToolTimeout = tools.DefaultCallTimeout

// MCPServer is an MCP server ("code mode") whose every tool cell code calls as
//
//	await tools.<Name>.<tool>(**arguments)
//
// It is started (or reached) when the workbench opens, and its tools are listed then;
// it is stopped when the workbench closes. A server that fails to start is an error of
// OpenWorkbench; one that dies or hangs later fails the calls that reach it.
type MCPServer struct {
	// Name is the namespace: a Python identifier, not a keyword, not starting with "_".
	Name string
	// Command is the argv of a server spoken to on its stdin and stdout.
	Command []string
	// URL is the endpoint of a server reached over streamable HTTP (http:// or https://).
	URL string
	// Env is a stdio server's environment; nil means the host's.
	Env []string
}

// ParseMCPServer reads NAME=URL (http:// or https://) or NAME=COMMAND, a command line
// split at spaces, with no quoting: the form of kiln's --mcp flag.
func ParseMCPServer(s string) (MCPServer, error) {
	name, target, ok := strings.Cut(s, "=")
	switch {
	case !ok || strings.TrimSpace(target) == "":
		return MCPServer{}, fmt.Errorf("kiln: %q is not NAME=COMMAND or NAME=URL", s)
	case !tools.ValidNamespace(name):
		return MCPServer{}, fmt.Errorf("kiln: %q: the name %q is not a Python identifier", s, name)
	case strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://"):
		return MCPServer{Name: name, URL: target}, nil
	}
	return MCPServer{Name: name, Command: strings.Fields(target)}, nil
}

// toolsTo are the registry's tools of fns.
func toolsTo(fns []Tool) []tools.Tool {
	var out []tools.Tool
	for _, t := range fns {
		out = append(out, tools.Tool{Namespace: t.Namespace, Name: t.Name, Description: t.Description,
			InputSchema: jsontext.Value(t.InputSchema), Handler: goHandler(t.Handler)})
	}
	return out
}

// serversTo are the tools package's servers of servers.
func serversTo(servers []MCPServer) []tools.Server {
	var out []tools.Server
	for _, s := range servers {
		out = append(out, tools.Server{Name: s.Name, Command: s.Command, URL: s.URL, Env: s.Env})
	}
	return out
}

// goHandler adapts a Tool's handler to the registry's.
func goHandler(h func(ctx context.Context, arguments []byte) (any, error)) tools.Handler {
	if h == nil {
		return nil
	}
	return func(ctx context.Context, arguments jsontext.Value) (jsontext.Value, error) {
		result, err := h(ctx, arguments)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return nil, err
			}
			return nil, &tools.Error{Message: err.Error()}
		}
		data, err := json.Marshal(result, json.Deterministic(true))
		if err != nil {
			return nil, &tools.Error{Message: fmt.Sprintf("the tool's result cannot be encoded as JSON: %v", err)}
		}
		return data, nil
	}
}

// ToolsetOptions are the tools of a Toolset.
type ToolsetOptions struct {
	Tools   []Tool        // Go functions
	MCP     []MCPServer   // MCP servers, each a namespace
	Timeout time.Duration // bounds one call; default DefaultToolTimeout
	Logger  *slog.Logger  // nil discards
}

// Toolset is one registry of tools opened for programs: the same Go functions and MCP
// servers' tools a workbench offers its cells, as bindings. A program calls
//
//	await <namespace>.<tool>({"a": 1})
//
// with the arguments as one object, checked against the tool's input schema; a failed
// call raises ToolError("<code>: <message>"). Its methods are safe for concurrent use.
type Toolset struct {
	tb *session.Toolbox
}

// OpenToolset connects the MCP servers and lists their tools; Close stops them.
func OpenToolset(ctx context.Context, opts ToolsetOptions) (*Toolset, error) {
	tb, err := session.OpenToolbox(ctx, toolsTo(opts.Tools), serversTo(opts.MCP), opts.Timeout, opts.Logger)
	if err != nil {
		return nil, err
	}
	return &Toolset{tb: tb}, nil
}

// Namespaces are the tools as a program's namespaces, one per tools namespace, to add
// to Program.Namespaces. A program's calls reach the tools with its values as they
// come, converted into no other type; so each Namespace has its tools in a field of its
// own, and its Funcs is nil: Funcs set there add bindings, or replace tools by name.
func (t *Toolset) Namespaces() []Namespace { return namespacesFrom(t.tb.Registry().Bindings()) }

// namespacesFrom are the public namespaces of ns, holding their bindings as they are.
func namespacesFrom(ns []program.Namespace) []Namespace {
	var out []Namespace
	for _, n := range ns {
		out = append(out, Namespace{Global: n.Global, ErrorClass: (*ErrorClass)(n.ErrorClass),
			MaxConcurrent: n.MaxConcurrent, tools: n.Funcs})
	}
	return out
}

// Close stops the MCP servers.
func (t *Toolset) Close() { t.tb.Close() }
