package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/wire"
)

// execHooks adds an execution.review entrypoint to testHooks: code naming "rm" is held,
// "raise" raises, "garbage" returns 42 (which the hooks worker refuses), "echo" holds with what the hook was given, and
// the rest is allowed.
const execHooks = testHooks + `
def execution(request, context):
    if "raise" in request.code:
        raise ValueError("no")
    if "garbage" in request.code:
        return 42
    if "echo" in request.code:
        return Hold(f"{request.turn} {request.cell} {len(request.code)} {context.slot}")
    if "rm" in request.code:
        return Hold("it removes files")
    return Allow()
`

const execManifest = `{"version":1,"hooks":{"attention.plan":"testhooks:attention","delivery.review":"testhooks:delivery",` +
	`"execution.review":"testhooks:execution"}}`

// TestExecutionReviewHook: a release that names execution.review is asked about each
// cell, through a real hooks worker, and its hold, a failure or garbage all hold; a cell
// of MaxReviewCode bytes is asked, one past it is held unasked; a release that names no
// entrypoint is not asked (ok false), and its hooks worker serves the two slots alone.
func TestExecutionReviewHook(t *testing.T) {
	data := dataDir(t)
	id := storeRelease(t, data, map[string]string{"manifest.json": execManifest,
		"testhooks.py": strings.Replace(execHooks, "from kiln_hooks import Allow,", "from kiln_hooks import Allow, Hold,", 1)})
	ctx := context.Background()
	p, err := Start(ctx, Config{Python: pythonPath(t), SessionID: "s", ReleaseID: id, DataDir: data}) // not against a budget
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, tc := range []struct {
		code, action, reason string
	}{
		{"print(1)", "allow", ""},
		{"rm('x')", "hold", "it removes files"},
		{"raise", "hold", "ValueError: no"},
		{"garbage", "hold", "hook returned int, not one of Allow, Hold"},
		{"echo", "hold", "3 c-7 4 execution.review"},
		{"#" + strings.Repeat("x", MaxReviewCode-1), "allow", ""},
		{"#" + strings.Repeat("x", MaxReviewCode), "hold", "not asked"},
	} {
		r, ok := p.ReviewExecution(ctx, 3, "c-7", tc.code)
		if !ok || r.Action != tc.action || !strings.Contains(r.Reason, tc.reason) {
			t.Errorf("code of %d bytes: %+v, %v; want %s %q", len(tc.code), r, ok, tc.action, tc.reason)
		}
	}
	if a := p.Plan(ctx, 1, SourceOperator, 1); a.Action != "wake" {
		t.Errorf("the release's other slots: %+v", a)
	}

	plain, err := Start(ctx, Config{Python: pythonPath(t), SessionID: "s", ReleaseID: Initial().ID})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if r, ok := plain.ReviewExecution(ctx, 1, "c-1", "rm('x')"); ok {
		t.Errorf("the initial release, which names no entrypoint, was asked: %+v", r)
	}
	if r := plain.Review(ctx, 1, "hello"); r.Action != "allow" {
		t.Errorf("the initial release's hooks worker: %+v", r)
	}
	if handlers, err := p.Handlers(); err != nil || handlers[wire.SlotExecutionReview] != "testhooks:execution" {
		t.Errorf("handlers: %v %v", handlers, err)
	}
}
