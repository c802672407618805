package route_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/route"
	"github.com/kilnrt/kiln/internal/route/routetest"
)

// TestImagesReachTheModel: a tool result's PNG goes to each wire format as its image
// content — an image block in Anthropic's tool_result, a user message of image_url or
// input_image data URLs after the OpenAI routes' tool output — and a route with images
// off, or a media type no route takes, sends none.
func TestImagesReachTheModel(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nnot really")
	encoded := base64.StdEncoding.EncodeToString(png)
	want := map[string][]string{
		routetest.OpenAIChat:      {`"type":"image_url"`, `"url":"data:image/png;base64,` + encoded + `"`},
		routetest.OpenAIResponses: {`"type":"input_image"`, `"image_url":"data:image/png;base64,` + encoded + `"`},
		routetest.Anthropic:       {`"type":"tool_result"`, `"type":"image"`, `"media_type":"image/png"`, `"data":"` + encoded + `"`},
	}
	msgs := []route.Message{
		{Role: route.RoleUser, Text: "draw"},
		{Role: route.RoleAssistant, Call: &route.Call{ID: "call_1", Arguments: `{"code":"show()"}`, Code: "show()"}},
		{Role: route.RoleTool, CallID: "call_1", Text: "[image/png display, 18 bytes]",
			Images: []route.Image{{MIMEType: "image/png", Data: png}, {MIMEType: "image/svg+xml", Data: []byte("<svg/>")}}},
	}
	for _, w := range wires {
		for _, images := range []bool{true, false} {
			srv := routetest.New(t, w.wire, routetest.Step{Text: "seen"})
			cfg := w.cfg
			cfg.Images = images
			c := client(t, cfg, srv)
			if got := route.Describe(c).Images; got != images {
				t.Errorf("%s: Describe says images %v", w.name, got)
			}
			if _, err := c.Call(t.Context(), route.Request{System: "s", Messages: msgs}); err != nil {
				t.Fatal(err)
			}
			body := string(srv.Bodies()[0])
			for _, part := range want[w.wire] {
				if strings.Contains(body, part) != images && !(part == `"type":"tool_result"`) {
					t.Errorf("%s, images %v: %s in the body is %v:\n%s", w.name, images, part, !images, body)
				}
			}
			if strings.Contains(body, "svg") {
				t.Errorf("%s: an image/svg+xml was sent", w.name)
			}
		}
	}
}
