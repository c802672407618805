package kiln_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kilnrt/kiln"
)

func search(ctx context.Context, args kiln.Value) (kiln.Value, error) {
	q, ok := args.(kiln.Object)
	if !ok {
		return nil, errors.New("want an object")
	}
	v, _ := q.Get("q")
	return kiln.Array{v, kiln.String("b")}, nil
}

func ExampleRun() {
	res, err := kiln.Run(context.Background(), kiln.Program{
		Source: "hits = await tools.search({'q': 'kiln'})\nprint('found', len(hits))\nreturn hits",
		Namespaces: []kiln.Namespace{{
			Global: "tools",
			Funcs:  map[string]kiln.Func{"search": search},
		}},
		Limits: kiln.Limits{Wall: 30 * time.Second},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, res.Value, res.Logs)
	// Output: ok [kiln b] [found 2]
}

func TestRunStatuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		src  string
		want kiln.RunStatus
	}{
		{"return 1", kiln.RunOK},
		{"raise ValueError('no')", kiln.RunException},
		{"return float('nan')", kiln.RunInvalidOutput},
		{"return 'x' * 100000", kiln.RunOutputLimit},
		{"import os\nos._exit(3)", kiln.RunWorkerExit},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			res, err := kiln.Run(ctx, kiln.Program{Source: tt.src})
			if err != nil || res.Status != tt.want {
				t.Errorf("got %s (%s), %v; want %s", res.Status, res.Error, err, tt.want)
			}
		})
	}
}

func TestRunTimeoutAndAbort(t *testing.T) {
	t.Parallel()
	res, err := kiln.Run(context.Background(), kiln.Program{Source: "import time\ntime.sleep(60)", Limits: kiln.Limits{Wall: 500 * time.Millisecond}})
	if err != nil || res.Status != kiln.RunTimeout {
		t.Errorf("got %s, %v; want timeout", res.Status, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	res, err = kiln.Run(ctx, kiln.Program{Source: "import time\ntime.sleep(60)"})
	if err != nil || res.Status != kiln.RunAbort {
		t.Errorf("got %s, %v; want abort", res.Status, err)
	}
}

func TestRunnerPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := kiln.NewRunner(ctx, kiln.RunnerOptions{Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The child's own directory, HOME's parent: pids repeat, each child in a PID
	// namespace of its own.
	p := kiln.Program{Source: "import os\nreturn os.path.dirname(os.environ['HOME'])"}
	if err := r.Warm(ctx, p); err != nil {
		t.Fatal(err)
	}
	seen := map[kiln.Value]bool{}
	for range 3 {
		res, err := r.Run(ctx, p)
		if err != nil || res.Status != kiln.RunOK {
			t.Fatalf("%s %s %v", res.Status, res.Error, err)
		}
		if seen[res.Value] {
			t.Errorf("the child of %v served two runs", res.Value)
		}
		seen[res.Value] = true
	}
	r.Close()
	if _, err := r.Run(ctx, p); !errors.Is(err, kiln.ErrRunnerClosed) {
		t.Errorf("after Close: %v; want ErrRunnerClosed", err)
	}
}

func TestRunInvalidProgram(t *testing.T) {
	t.Parallel()
	_, err := kiln.Run(context.Background(), kiln.Program{Limits: kiln.Limits{MaxLogBytes: 1}})
	if !errors.Is(err, kiln.ErrInvalidProgram) {
		t.Errorf("got %v; want ErrInvalidProgram", err)
	}
}
