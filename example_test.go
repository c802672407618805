package kiln_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/kilnrt/kiln"
)

// examplePython is the interpreter the examples run: $KILN_PYTHON, else python3.
func examplePython() string { return kiln.DefaultPython(os.Getenv) }

// A workbench keeps its namespace from cell to cell. With no DataDir its record is
// ephemeral: every host service works, and nothing outlives Close.
func ExampleOpenWorkbench() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "kiln-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	wb, err := kiln.OpenWorkbench(ctx, kiln.WorkbenchOptions{Workspace: dir, Python: examplePython()})
	if err != nil {
		panic(err)
	}
	defer wb.Close()
	if _, err := wb.Execute(ctx, "x = 20"); err != nil {
		panic(err)
	}
	rec, err := wb.Execute(ctx, "print('adding')\nx + 1")
	if err != nil {
		panic(err)
	}
	fmt.Println(rec.ID, rec.Status)
	for _, o := range rec.Output {
		fmt.Printf("%s: %s\n", o.Stream, strings.TrimSpace(o.Text))
	}
	// Output:
	// c-2 ok
	// stdout: adding
	// result: 21
}

// Go functions given as Tools are what cells call as await tools.<namespace>.<name>.
func ExampleOpenWorkbench_tools() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "kiln-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	add := kiln.Tool{Namespace: "calc", Name: "add", Description: "Adds a and b.",
		Handler: func(ctx context.Context, arguments []byte) (any, error) {
			v, err := kiln.DecodeValue(arguments)
			if err != nil {
				return nil, err
			}
			a, _ := v.(kiln.Object).Get("a")
			b, _ := v.(kiln.Object).Get("b")
			return float64(a.(kiln.Number) + b.(kiln.Number)), nil
		}}
	wb, err := kiln.OpenWorkbench(ctx, kiln.WorkbenchOptions{Workspace: dir, Python: examplePython(), Tools: []kiln.Tool{add}})
	if err != nil {
		panic(err)
	}
	defer wb.Close()
	rec, err := wb.Execute(ctx, "await tools.calc.add(a=2, b=3)")
	if err != nil {
		panic(err)
	}
	fmt.Println(rec.Status, rec.Output[0].Text)
	// Output: ok 5
}

// A Runner runs one-shot programs, each in a fresh interpreter: the program's return
// value is the result's Value, what it printed its Logs.
func ExampleNewRunner() {
	ctx := context.Background()
	r, err := kiln.NewRunner(ctx, kiln.RunnerOptions{Python: examplePython()})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	for _, src := range []string{"return 6 * 7", "raise ValueError('no')"} {
		res, err := r.Run(ctx, kiln.Program{Source: src})
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Status, res.Value)
	}
	// Output:
	// ok 42
	// exception <nil>
}

// DecodeValue reads JSON losslessly: object members keep their order, and numbers their
// value.
func ExampleDecodeValue() {
	v, err := kiln.DecodeValue([]byte(`{"b": [1, 2.5], "a": "x"}`))
	if err != nil {
		panic(err)
	}
	o := v.(kiln.Object)
	var keys []string
	for k := range o.All() {
		keys = append(keys, k)
	}
	b, _ := o.Get("b")
	fmt.Println(o.Len(), keys, b)
	data, _ := kiln.EncodeValue(v)
	fmt.Println(string(data))
	// Output:
	// 2 [b a] [1 2.5]
	// {"b":[1,2.5],"a":"x"}
}
