package agenttests

import (
	"strings"
	"testing"

	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/route/routetest"
)

// TestTheModelSeesTheImagesACellDisplays: a cell that displays five PNGs is answered,
// on an Anthropic route, with four image blocks in its tool result (the bound of a
// step) and a line saying one was left out; the model call's record counts the four.
func TestTheModelSeesTheImagesACellDisplays(t *testing.T) {
	srv := routetest.New(t, routetest.Anthropic,
		routetest.Step{Code: routetest.Code("import base64\nclass Dot:\n" +
			"    def _repr_png_(self): return base64.b64decode('" + clitest.DotPNG + "')\n" +
			"for _ in range(5):\n    display(Dot())")},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None, reason="seen")`)})
	dir := agentDataDir(t, srv, "")
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"i"}`, 201, nil)
	s.Call("POST", "/v1/sessions/i/inputs", `{"text":"draw"}`, 201, nil)
	clitest.FollowUntil(t, dir, "i", 0, func(e client.Event) bool {
		return e.Kind == "turn.end" && clitest.EndReason(t, e) == "waited"
	})
	bodies := srv.Bodies()
	if len(bodies) < 2 {
		t.Fatalf("%d requests", len(bodies))
	}
	body := string(bodies[1])
	if n := strings.Count(body, `"type":"image"`); n != 4 || !strings.Contains(body, `"data":"`+clitest.DotPNG+`"`) ||
		!strings.Contains(body, "1 of the cell's 5 images are not shown") || !strings.Contains(body, "[image/png display, ") {
		t.Errorf("%d image blocks in the request after the cell:\n%s", n, body)
	}
	e := clitest.FollowUntil(t, dir, "i", 0, func(e client.Event) bool {
		return e.Kind == "model_call" && strings.Contains(string(e.Raw), `"images":4`)
	})
	if strings.Contains(string(e.Raw), clitest.DotPNG) {
		t.Errorf("the model call's record holds the image: %s", e.Raw)
	}
}
