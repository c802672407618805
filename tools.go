package kiln

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
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

// toolbox is the tools of a workbench: their registry, and the catalog its generations
// load.
type toolbox struct {
	registry *tools.Registry
	payload  []byte // nil when there are no tools
}

// openTools builds the registry of fns.
func openTools(fns []Tool, timeout time.Duration) (*toolbox, error) {
	reg := tools.New(timeout)
	for _, t := range fns {
		if err := reg.Add(tools.Tool{Namespace: t.Namespace, Name: t.Name, Description: t.Description,
			InputSchema: jsontext.Value(t.InputSchema), Handler: goHandler(t.Handler)}); err != nil {
			return nil, fmt.Errorf("kiln: %w", err)
		}
	}
	payload, err := reg.Payload()
	if err != nil {
		return nil, fmt.Errorf("kiln: %w", err)
	}
	return &toolbox{registry: reg, payload: payload}, nil
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
