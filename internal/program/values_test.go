package program

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/lossless"
)

// TestDeepValuesRoundTrip returns a 10,000-deep completion, and takes a 12,000-deep
// binding reply and sends it back as a binding argument: no depth limit anywhere.
func TestDeepValuesRoundTrip(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	t.Run("completion 10,000 deep", func(t *testing.T) {
		t.Parallel()
		res := run(t, r, nil, testLimits, `v = []
for _ in range(9999):
    v = [v]
return v`)
		wantStatus(t, res, StatusOK)
		if d := depth(res.Value); d != 10_000 {
			t.Errorf("depth %d; want 10000", d)
		}
	})
	t.Run("completion 20,000 deep over budget", func(t *testing.T) {
		t.Parallel()
		res := run(t, r, nil, testLimits, `v = []
for _ in range(19999):
    v = [v]
return v`)
		wantStatus(t, res, StatusOutputLimit)
	})
	t.Run("binding reply 12,000 deep", func(t *testing.T) {
		t.Parallel()
		res := run(t, r, &toolbox{}, testLimits, pyDepth+`
v = await tools.deep(12000)
return [depth(v), await tools.depth(v)]`)
		wantValue(t, res, "[12000,12000]")
	})
}

// TestSixMillionZeros carries [0]*6_000_000 (12 MB of JSON) as a completion and as a
// binding argument.
func TestSixMillionZeros(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	lim := testLimits
	lim.MaxValueBytes = 16 << 20
	lim.AddressSpaceBytes = 1 << 30
	t.Run("completion", func(t *testing.T) {
		t.Parallel()
		res := run(t, r, nil, lim, "return [0] * 6_000_000")
		wantStatus(t, res, StatusOK)
		a, _ := res.Value.(lossless.Array)
		if len(a) != 6_000_000 || a[0] != lossless.Number(0) || a[len(a)-1] != lossless.Number(0) {
			t.Errorf("got %d elements; want 6000000 zeros", len(a))
		}
	})
	t.Run("binding argument", func(t *testing.T) {
		t.Parallel()
		res := run(t, r, &toolbox{}, lim, "return await tools.len([0] * 6_000_000)")
		wantValue(t, res, "6000000")
	})
}

// TestSixMillionZerosIn384MiB is the reference's case: [0]*6_000_000 as the completion
// and as a binding argument, with a 20 MiB value budget, under 384 MiB of address
// space. The child encodes the 12 MB of text a piece at a time, not a string per zero.
func TestSixMillionZerosIn384MiB(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	lim := testLimits
	lim.MaxValueBytes = 20 << 20
	lim.AddressSpaceBytes = 384 << 20
	res := run(t, r, nil, lim, "return [0] * 6_000_000")
	wantStatus(t, res, StatusOK)
	if a, _ := res.Value.(lossless.Array); len(a) != 6_000_000 {
		t.Errorf("got %d elements; want 6000000", len(a))
	}
	res = run(t, r, &toolbox{}, lim, "return await tools.len([0] * 6_000_000)")
	wantValue(t, res, "6000000")
}

// TestNumbersRoundTrip sends numbers whose spelling matters out as a completion and
// through a binding and back, and checks each arrives as the same double.
func TestNumbersRoundTrip(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	res := run(t, r, &toolbox{}, testLimits, `vals = [1.0, 1e-7, 1e21, 2**60, 5e-324, -1.5, 0.1]
back = await tools.echo(vals)
return {"vals": vals, "same": back == vals and [float(x) for x in back] == [float(x) for x in vals]}`)
	wantStatus(t, res, StatusOK)
	obj := res.Value.(lossless.Object)
	if same, _ := obj.Get("same"); same != lossless.Bool(true) {
		t.Errorf("the binding's echo differs from what was sent")
	}
	vals, _ := obj.Get("vals")
	want := []float64{1, 1e-7, 1e21, 1 << 60, 5e-324, -1.5, 0.1}
	for i, v := range vals.(lossless.Array) {
		if float64(v.(lossless.Number)) != want[i] {
			t.Errorf("vals[%d] = %v; want %v", i, v, want[i])
		}
	}
	if got, want := string(lossless.Encode(vals)), "[1,1e-7,1000000000000000000000,1152921504606846976,5e-324,-1.5,0.1]"; got != want {
		t.Errorf("encoded %s; want %s", got, want)
	}
}

// TestValueBudget: "é" is 4 bytes of JSON, which fit a 4-byte budget; "éx" does not.
// A budget is checked at the limit and one past it.
func TestValueBudget(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	lim := testLimits
	lim.MaxValueBytes = 4
	tests := []struct {
		src    string
		status Status
	}{
		{`return "é"`, StatusOK},
		{`return "éx"`, StatusOutputLimit},
		{`return 1234`, StatusOK},
		{`return 12345`, StatusOutputLimit},
		{`return None`, StatusOK},
		{`return [float("nan"), "x" * 10]`, StatusOutputLimit}, // over budget wins
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			res := run(t, r, nil, lim, tt.src)
			wantStatus(t, res, tt.status)
			if tt.status == StatusOutputLimit && res.Error != "completion value exceeded 4 bytes" {
				t.Errorf("error %q", res.Error)
			}
		})
	}
}

// TestNotLosslessIsInvalidOutput returns values JSON cannot carry exactly.
func TestNotLosslessIsInvalidOutput(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	for _, src := range []string{
		"return 2**53 + 1",
		"return -0.0",
		"return float('nan')",
		"return float('inf')",
		"return {1, 2}",
		"return {1: 0, '1': 0}",
		"return (1, 2)",
		"return [1, [2, {'a': float('-inf')}]]",
	} {
		t.Run(src, func(t *testing.T) {
			t.Parallel()
			res := run(t, r, nil, testLimits, src)
			wantStatus(t, res, StatusInvalidOutput)
			if res.Value != nil || res.Error == "" {
				t.Errorf("value %v, error %q; want no value and a reason", res.Value, res.Error)
			}
		})
	}
}

// TestGather1025Calls gathers more calls than MaxCallsInFlight: all are answered.
func TestGather1025Calls(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	tb := &toolbox{}
	res := run(t, r, tb, testLimits, `import asyncio
got = await asyncio.gather(*[tools.echo(i) for i in range(1025)])
return got == list(range(1025))`)
	wantValue(t, res, "true")
	if n := tb.calls.Load(); n != 1025 {
		t.Errorf("%d invocations; want 1025", n)
	}
}

// TestBindingRejections: a binding's error, an unknown name, a result that is not
// lossless and a panic each reject the call; the program sees the error class the
// namespace declares, with the message and the binding's name.
func TestBindingRejections(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	res := run(t, r, &toolbox{}, testLimits, `out = []
for name in ["fail", "nan", "panic"]:
    try:
        await tools[name](None)
        out.append("resolved")
    except ToolError as e:
        out.append([str(e), e.member])
try:
    tools.missing
except AttributeError:
    out.append("no attribute")
return out`)
	wantValue(t, res, `[["no such record","fail"],["binding resolution must be lossless JSON","nan"],["binding tools.panic panicked: boom","panic"],"no attribute"]`)
}

// TestDoneValueRecheck: the host meters the completion itself, so a budget or a lossy
// number the child let through is caught (here forged, as a hostile child would).
func TestDoneValueRecheck(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	lim := testLimits
	lim.MaxValueBytes = 10
	res := run(t, r, nil, lim, forgeHelper+`
forge(b'{"type":"done","value":"0123456789"}\n')`)
	wantStatus(t, res, StatusOutputLimit)
	// 1e21 counts as JSON.stringify writes it, 1e+21: 7 bytes with its brackets.
	lim.MaxValueBytes = 7
	res = run(t, r, nil, lim, `return [1e21]`)
	wantStatus(t, res, StatusOK)
	if f := float64(res.Value.(lossless.Array)[0].(lossless.Number)); f != 1e21 {
		t.Errorf("got %v; want 1e21", f)
	}
	lim.MaxValueBytes = 6
	res = run(t, r, nil, lim, `return [1e21]`)
	wantStatus(t, res, StatusOutputLimit)
}

// TestCallArgumentsAtTheFrameCap passes a binding arguments whose call frame is
// exactly the frame cap, which the host takes, and one byte more, which the child
// refuses with a ValueError before sending: the run goes on.
func TestCallArgumentsAtTheFrameCap(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	limit := FrameCap(testLimits.withDefaults())
	// {"type":"call","id":0,"global":"tools","name":"echo","args":"…"}
	overhead := len(`{"type":"call","id":0,"global":"tools","name":"echo","args":""}`)
	res := run(t, r, &toolbox{}, testLimits, fmt.Sprintf(`
n = %d
at = await tools.echo("x" * n)
try:
    await tools.echo("x" * (n + 1))
    past = "sent"
except ValueError as e:
    past = str(e)
return [len(at), past]`, limit-overhead))
	wantValue(t, res, fmt.Sprintf(`[%d,"tools.echo: the call is %d bytes as a frame; fd 3 carries at most %d"]`, limit-overhead, limit+1, limit))
}

// TestErrorOfControlCharactersFitsTheFrame raises an exception whose message, at the
// value budget, escapes to six times that: the child cuts it to fit the frame cap,
// and the run ends as an exception, not a breach of the protocol.
func TestErrorOfControlCharactersFitsTheFrame(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	lim := testLimits
	lim.MaxValueBytes = 1 << 20
	res := run(t, r, nil, lim, `raise ValueError("\x01" * (1 << 20))`)
	wantStatus(t, res, StatusException)
	if !strings.HasSuffix(res.Error, truncatedSuffix) {
		t.Errorf("error of %d bytes, ending %q; want it cut", len(res.Error), res.Error[len(res.Error)-20:])
	}
}

// TestReplyAtTheQueueBound returns from a binding a string whose reply frame is
// exactly MaxReplyQueueBytes, which reaches the program, and one a byte longer, which
// the program gets as a rejection.
func TestReplyAtTheQueueBound(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	r.stall = time.Minute // a loaded machine may leave a 32 MiB reply unread for seconds
	overhead := len(`{"type":"reply","id":0,"ok":true,"value":""}` + "\n")
	ns := Namespace{Global: "tools", Funcs: map[string]Func{
		"text": func(_ context.Context, v lossless.Value) (lossless.Value, error) {
			n, _ := v.(lossless.Number)
			return lossless.String(strings.Repeat("x", int(n))), nil
		},
	}}
	res, err := r.Run(context.Background(), Program{Namespaces: []Namespace{ns}, Limits: testLimits, Source: fmt.Sprintf(`
n = %d
at = len(await tools.text(n))
try:
    await tools.text(n + 1)
    past = "delivered"
except RuntimeError as e:
    past = str(e)
return [at, past]`, MaxReplyQueueBytes-overhead)})
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, res, fmt.Sprintf(`[%d,"the binding's result exceeds %d bytes as a reply"]`, MaxReplyQueueBytes-overhead, MaxReplyQueueBytes))
}
