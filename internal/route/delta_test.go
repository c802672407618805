package route_test

import (
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/route"
	"github.com/kilnrt/kiln/internal/route/routetest"
)

// TestDeltasStream: each streaming wire tells OnDelta the reply's text and the python
// call's arguments as they arrive, in pieces that join into the reply's own; a retried
// call says so (restart) before its second attempt; a whole (not streamed) reply tells
// nothing.
func TestDeltasStream(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			srv := routetest.New(t, w.wire, routetest.Step{Status: 500},
				routetest.Step{Text: "Let me look at the files.", Code: routetest.Code("print(sorted(__import__('os').listdir()))")})
			c := client(t, w.cfg, srv)
			var kinds []string
			pieces := map[string]*strings.Builder{route.DeltaText: {}, route.DeltaArguments: {}}
			req := route.Request{System: "h", Messages: []route.Message{{Role: route.RoleUser, Text: "hi"}},
				OnDelta: func(kind, text string) {
					kinds = append(kinds, kind)
					if b := pieces[kind]; b != nil {
						b.WriteString(text)
					}
				}}
			r, err := c.Call(t.Context(), req)
			if err != nil || r.Call == nil {
				t.Fatalf("got %+v, %v", r, err)
			}
			if !w.cfg.Stream && w.cfg.Kind == route.KindOpenAIChat {
				if len(kinds) != 1 || kinds[0] != route.DeltaRestart {
					t.Errorf("a whole reply told %q", kinds)
				}
				return
			}
			if len(kinds) < 3 || kinds[0] != route.DeltaRestart {
				t.Errorf("the pieces' kinds: %q; want restart first", kinds)
			}
			if got := pieces[route.DeltaText].String(); got != r.Text {
				t.Errorf("text pieces %q; the reply's text %q", got, r.Text)
			}
			if got := pieces[route.DeltaArguments].String(); got != r.Call.Arguments {
				t.Errorf("argument pieces %q; the call's arguments %q", got, r.Call.Arguments)
			}
		})
	}
}
