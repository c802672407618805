package program

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/lossless"
)

// pythonPath is the interpreter the tests run, resolved once in TestMain.
var pythonPath string

func TestMain(m *testing.M) {
	in, err := interp.Find(context.Background(), "python3")
	if err != nil {
		fmt.Fprintln(os.Stderr, "program tests need python3:", err)
		os.Exit(1)
	}
	pythonPath = in.Path
	os.Exit(leakcheck.Run(m))
}

// newRunner returns a Runner closed at the end of the test, with a short grace unless
// opts says otherwise.
func newRunner(t testing.TB, opts Options) *Runner {
	t.Helper()
	opts.Python = pythonPath
	if opts.Grace == 0 {
		opts.Grace = 300 * time.Millisecond
	}
	r, err := NewRunner(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// run runs src with the toolbox's namespace and lim, failing the test on an error.
func run(t testing.TB, r *Runner, tb *toolbox, lim Limits, src string) Result {
	t.Helper()
	p := Program{Source: src, Limits: lim}
	if tb != nil {
		p.Namespaces = []Namespace{tb.namespace()}
	}
	res, err := r.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// testLimits are short limits for tests. The wall clock only bounds a hang: a loaded
// machine runs the heaviest tests for tens of seconds.
var testLimits = Limits{CPUSeconds: 5, Wall: 5 * time.Minute}

// toolbox is the "tools" namespace the tests bind, counting its calls.
type toolbox struct {
	calls atomic.Int64
	last  atomic.Value // the last args of tools.keep
}

func (tb *toolbox) namespace() Namespace {
	return Namespace{
		Global:     "tools",
		ErrorClass: &ErrorClass{Name: "ToolError", MemberNameProperty: "member"},
		Funcs: map[string]Func{
			"echo": func(_ context.Context, v lossless.Value) (lossless.Value, error) {
				tb.calls.Add(1)
				return v, nil
			},
			"count": func(_ context.Context, _ lossless.Value) (lossless.Value, error) {
				return lossless.Number(tb.calls.Add(1)), nil
			},
			"keep": func(_ context.Context, v lossless.Value) (lossless.Value, error) {
				tb.calls.Add(1)
				tb.last.Store(lossless.Array{v})
				return nil, nil
			},
			"fail": func(_ context.Context, v lossless.Value) (lossless.Value, error) {
				tb.calls.Add(1)
				return nil, errors.New("no such record")
			},
			"nan": func(_ context.Context, _ lossless.Value) (lossless.Value, error) {
				return lossless.Array{lossless.Number(math.NaN())}, nil
			},
			"panic": func(_ context.Context, _ lossless.Value) (lossless.Value, error) {
				panic("boom")
			},
			"deep": func(_ context.Context, v lossless.Value) (lossless.Value, error) {
				n, _ := v.(lossless.Number)
				return deep(int(n)), nil
			},
			"depth": func(_ context.Context, v lossless.Value) (lossless.Value, error) {
				return lossless.Number(depth(v)), nil
			},
			"len": func(_ context.Context, v lossless.Value) (lossless.Value, error) {
				a, _ := v.(lossless.Array)
				for _, e := range a {
					if e != lossless.Number(0) {
						return nil, errors.New("not all zeros")
					}
				}
				return lossless.Number(len(a)), nil
			},
			"sleep": func(ctx context.Context, _ lossless.Value) (lossless.Value, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
		},
	}
}

// deep returns [[…[]…]], n arrays deep.
func deep(n int) lossless.Value {
	v := lossless.Array{}
	for range n - 1 {
		v = lossless.Array{v}
	}
	return v
}

// depth returns how many arrays deep v's first elements go.
func depth(v lossless.Value) int {
	d := 0
	for {
		a, ok := v.(lossless.Array)
		if !ok {
			return d
		}
		d++
		if len(a) == 0 {
			return d
		}
		v = a[0]
	}
}

// pyDepth is Python that defines depth(v) as the Go depth does.
const pyDepth = `
def depth(v):
    d = 0
    while type(v) is list:
        d += 1
        v = v[0] if v else None
    return d
`

func wantStatus(t testing.TB, res Result, want Status) {
	t.Helper()
	if res.Status != want {
		t.Fatalf("status %s (%s); want %s; logs %q", res.Status, res.Error, want, res.Logs)
	}
}

func wantValue(t testing.TB, res Result, want string) {
	t.Helper()
	wantStatus(t, res, StatusOK)
	if got := string(lossless.Encode(res.Value)); got != want {
		t.Fatalf("value %s; want %s", got, want)
	}
}

// abortWhenReady runs src, whose namespace "tools" has one binding, ready, and aborts
// the run once the program has called it. It returns the result and the time from the
// abort to Run's return.
func abortWhenReady(t testing.TB, r *Runner, src string) (Result, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var aborted atomic.Int64
	ns := Namespace{Global: "tools", Funcs: map[string]Func{
		"ready": func(context.Context, lossless.Value) (lossless.Value, error) {
			aborted.Store(time.Now().UnixNano())
			cancel()
			return nil, nil
		},
	}}
	res, err := r.Run(ctx, Program{Source: src, Namespaces: []Namespace{ns}, Limits: testLimits})
	if err != nil {
		t.Fatal(err)
	}
	if aborted.Load() == 0 {
		t.Fatalf("the program never called tools.ready: %s %s %q", res.Status, res.Error, res.Logs)
	}
	return res, time.Since(time.Unix(0, aborted.Load()))
}
