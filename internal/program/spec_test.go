package program

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/lossless"
)

// TestLimitsCheck checks each bound at the limit and one past it.
func TestLimitsCheck(t *testing.T) {
	ok := Limits{}.withDefaults()
	with := func(f func(*Limits)) Limits { l := ok; f(&l); return l }
	budgetAS := func(budget int) int64 { return reservedAddressSpace + int64(budget)*budgetMemoryFactor }
	tests := []struct {
		name string
		l    Limits
		ok   bool
	}{
		{"defaults", ok, true},
		{"CPUSeconds 1", with(func(l *Limits) { l.CPUSeconds = 1 }), true},
		{"CPUSeconds -1", with(func(l *Limits) { l.CPUSeconds = -1 }), false},
		{"Wall 1ns", with(func(l *Limits) { l.Wall = 1 }), true},
		{"Wall -1ns", with(func(l *Limits) { l.Wall = -1 }), false},
		{"MaxLogBytes at MinLogBytes", with(func(l *Limits) { l.MaxLogBytes = MinLogBytes }), true},
		{"MaxLogBytes one under", with(func(l *Limits) { l.MaxLogBytes = MinLogBytes - 1 }), false},
		{"MaxLogBytes at MaxBudgetBytes", with(func(l *Limits) { l.MaxLogBytes = MaxBudgetBytes; l.AddressSpaceBytes = 8 << 30 }), true},
		{"MaxLogBytes one past", with(func(l *Limits) { l.MaxLogBytes = MaxBudgetBytes + 1; l.AddressSpaceBytes = 8 << 30 }), false},
		{"MaxValueBytes 1", with(func(l *Limits) { l.MaxValueBytes = 1 }), true},
		{"MaxValueBytes -1", with(func(l *Limits) { l.MaxValueBytes = -1 }), false},
		{"MaxValueBytes at MaxBudgetBytes", with(func(l *Limits) { l.MaxValueBytes = MaxBudgetBytes; l.AddressSpaceBytes = 8 << 30 }), true},
		{"MaxValueBytes one past", with(func(l *Limits) { l.MaxValueBytes = MaxBudgetBytes + 1; l.AddressSpaceBytes = 8 << 30 }), false},
		{"AddressSpaceBytes just room for the budget", with(func(l *Limits) { l.AddressSpaceBytes = budgetAS(DefaultMaxLogBytes) + 1 }), true},
		{"AddressSpaceBytes no room", with(func(l *Limits) { l.AddressSpaceBytes = budgetAS(DefaultMaxLogBytes) }), false},
		{"AddressSpaceBytes negative", with(func(l *Limits) { l.AddressSpaceBytes = -1 }), false},
	}
	for _, tt := range tests {
		err := tt.l.check()
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v; want ok %v", tt.name, err, tt.ok)
		}
	}
}

func TestNamespaceCheck(t *testing.T) {
	f := func(context.Context, lossless.Value) (lossless.Value, error) { return nil, nil }
	fs := map[string]Func{"search": f}
	tests := []struct {
		name string
		ns   []Namespace
		ok   bool
	}{
		{"one", []Namespace{{Global: "tools", Funcs: fs}}, true},
		{"none", nil, true},
		{"no funcs", []Namespace{{Global: "tools"}}, true},
		{"error class", []Namespace{{Global: "tools", Funcs: fs, ErrorClass: &ErrorClass{"ToolError", "member"}}}, true},
		{"global not an identifier", []Namespace{{Global: "my tools", Funcs: fs}}, false},
		{"global a keyword", []Namespace{{Global: "class", Funcs: fs}}, false},
		{"global empty", []Namespace{{Global: "", Funcs: fs}}, false},
		{"global twice", []Namespace{{Global: "t", Funcs: fs}, {Global: "t", Funcs: fs}}, false},
		{"nil func", []Namespace{{Global: "t", Funcs: map[string]Func{"x": nil}}}, false},
		{"empty name", []Namespace{{Global: "t", Funcs: map[string]Func{"": f}}}, false},
		{"dunder member property", []Namespace{{Global: "t", Funcs: fs, ErrorClass: &ErrorClass{"E", "__class__"}}}, false},
		{"error class not an identifier", []Namespace{{Global: "t", Funcs: fs, ErrorClass: &ErrorClass{"E-1", "m"}}}, false},
	}
	for _, tt := range tests {
		_, err := newSpec(Program{Namespaces: tt.ns})
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v; want ok %v", tt.name, err, tt.ok)
		}
	}
}

// TestPoolConfigs keeps at most MaxPoolConfigs pools, displacing the least recently
// used: at the limit and one past it.
func TestPoolConfigs(t *testing.T) {
	r := &Runner{opts: Options{Pool: 1}, pools: map[string]*pool{}}
	specs := make([]*spec, MaxPoolConfigs+1)
	for i := range specs {
		s, err := newSpec(Program{Limits: Limits{CPUSeconds: i + 1}})
		if err != nil {
			t.Fatal(err)
		}
		specs[i] = s
	}
	for _, s := range specs[:MaxPoolConfigs] {
		r.poolLocked(s)
	}
	r.poolLocked(specs[0]) // used again: specs[1] is now the oldest
	if len(r.pools) != MaxPoolConfigs {
		t.Fatalf("%d pools; want %d", len(r.pools), MaxPoolConfigs)
	}
	r.poolLocked(specs[MaxPoolConfigs])
	if len(r.pools) != MaxPoolConfigs {
		t.Errorf("%d pools after one more; want %d", len(r.pools), MaxPoolConfigs)
	}
	for i, s := range specs {
		_, kept := r.pools[s.key]
		if want := i != 1; kept != want {
			t.Errorf("pool %d kept %v; want %v", i, kept, want)
		}
	}
}

// TestCallsInFlight holds every binding call until 1,024 are in flight: the host does
// not read the 1,025th until one is answered, then answers all. A first call of the
// namespace tells the host its replies are small: before that, each call would reserve
// initialReplyReserve of the reply queue, and only a few would start.
func TestCallsInFlight(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	release := make(chan struct{})
	started := make(chan struct{}, 2*MaxCallsInFlight)
	ns := Namespace{Global: "tools", Funcs: map[string]Func{
		"ping": func(context.Context, lossless.Value) (lossless.Value, error) { return nil, nil },
		"hold": func(ctx context.Context, v lossless.Value) (lossless.Value, error) {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return v, nil
		},
	}}
	done := make(chan Result, 1)
	go func() {
		res, _ := r.Run(context.Background(), Program{Namespaces: []Namespace{ns}, Limits: testLimits, Source: fmt.Sprintf(`import asyncio
await tools.ping()
got = await asyncio.gather(*[tools.hold(i) for i in range(%d)])
return got == list(range(%d))`, MaxCallsInFlight+1, MaxCallsInFlight+1)})
		done <- res
	}()
	for range MaxCallsInFlight {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the calls did not come")
		}
	}
	select {
	case <-started:
		t.Fatalf("call %d started while %d were in flight", MaxCallsInFlight+1, MaxCallsInFlight)
	case <-time.After(300 * time.Millisecond): // a slow machine can hide a breach here, never fake one
	}
	close(release)
	res := <-done
	wantValue(t, res, "true")
}

// TestMaxConcurrent gathers eight calls of a namespace that runs two at once: no more
// than two run together, and all are answered. A negative MaxConcurrent is invalid.
func TestMaxConcurrent(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	var running, most atomic.Int64
	ns := Namespace{Global: "tools", MaxConcurrent: 2, Funcs: map[string]Func{
		"hold": func(_ context.Context, v lossless.Value) (lossless.Value, error) {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			runtime.Gosched()
			running.Add(-1)
			return v, nil
		},
	}}
	res, err := r.Run(context.Background(), Program{Namespaces: []Namespace{ns}, Limits: testLimits, Source: `import asyncio
return await asyncio.gather(*[tools.hold(i) for i in range(8)])`})
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, res, "[0,1,2,3,4,5,6,7]")
	if m := most.Load(); m > 2 {
		t.Errorf("%d calls ran at once; want at most 2", m)
	}
	ns.MaxConcurrent = -1
	if _, err := r.Run(context.Background(), Program{Namespaces: []Namespace{ns}, Source: "return 1"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("MaxConcurrent -1: %v; want ErrInvalid", err)
	}
}
