package tools

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/lossless"
	"github.com/kilnrt/kiln/internal/program"
)

// Bindings are the registry's tools as program bindings: one namespace per tools
// namespace, a global of that name, whose members are its tools by attribute. A program
// calls await <namespace>.<tool>({…arguments…}) (no argument is {}); a failed call
// raises ToolError with "<code>: <message>", the tool's attribute as its "tool".
func (r *Registry) Bindings() []program.Namespace {
	var out []program.Namespace
	for _, ns := range r.Namespaces() {
		n := program.Namespace{Global: ns, Funcs: map[string]program.Func{},
			ErrorClass: &program.ErrorClass{Name: "ToolError", MemberNameProperty: "tool"}}
		for _, e := range r.order {
			if e.Namespace == ns {
				n.Funcs[e.attr] = r.binding(e)
			}
		}
		out = append(out, n)
	}
	return out
}

// binding is the program binding that calls e.
func (r *Registry) binding(e *entry) program.Func {
	return func(ctx context.Context, args lossless.Value) (lossless.Value, error) {
		var arguments jsontext.Value
		if args != nil {
			arguments = lossless.Encode(args)
		}
		value, err := r.Call(ctx, e.Namespace, e.Name, arguments)
		if err != nil {
			return nil, errors.New(Code(err) + ": " + message(err))
		}
		v, err := lossless.Decode(value)
		if err != nil {
			return nil, fmt.Errorf("%s: the result is not JSON a program can take: %v", CodeToolError, err)
		}
		return v, nil
	}
}
