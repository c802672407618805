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
func (r *Registry) Bindings() []program.Namespace { return r.RecordedBindings(nil) }

// RecordedBindings are Bindings whose calls rec records (see Recorder); a nil rec
// records none.
func (r *Registry) RecordedBindings(rec *Recorder) []program.Namespace {
	var out []program.Namespace
	for _, ns := range r.Namespaces() {
		n := program.Namespace{Global: ns, Funcs: map[string]program.Func{},
			ErrorClass: &program.ErrorClass{Name: "ToolError", MemberNameProperty: "tool"}}
		for _, e := range r.order {
			if e.Namespace == ns {
				n.Funcs[e.attr] = r.binding(e, rec)
			}
		}
		out = append(out, n)
	}
	return out
}

// binding is the program binding that calls e, through rec when it is not nil.
func (r *Registry) binding(e *entry, rec *Recorder) program.Func {
	call := r.Call
	if rec != nil {
		call = func(ctx context.Context, namespace, name string, arguments jsontext.Value) (jsontext.Value, error) {
			return rec.call(ctx, r, namespace, name, arguments)
		}
	}
	return func(ctx context.Context, args lossless.Value) (lossless.Value, error) {
		var arguments jsontext.Value
		if args != nil {
			arguments = lossless.Encode(args)
		}
		value, err := call(ctx, e.Namespace, e.Name, arguments)
		if err != nil {
			return nil, errors.New(Code(err) + ": " + message(err))
		}
		if lossless.UnsafeInteger(value) {
			// The rule of fd-3 frames: a double would round it, and the program would get
			// another number than the tool's.
			return nil, fmt.Errorf("%s: the result holds an integer a double cannot hold exactly", CodeToolError)
		}
		v, err := lossless.Decode(value)
		if err != nil {
			return nil, fmt.Errorf("%s: the result is not JSON a program can take: %v", CodeToolError, err)
		}
		return v, nil
	}
}
