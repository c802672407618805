package agent

import (
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/route"
)

// TestShownImagesAreBounded: a step shows at most MaxStepImages images of at most
// MaxStepImageBytes together, each bound tested at the limit and one past, saying what
// it left out; a route without images shows none and says so.
func TestShownImagesAreBounded(t *testing.T) {
	img := func(n int) route.Image { return route.Image{MIMEType: "image/png", Data: make([]byte, n)} }
	a := &Agent{step: route.Info{Images: true}}
	for _, tc := range []struct {
		name  string
		in    []route.Image
		shown int
		note  string
	}{
		{"at the count", []route.Image{img(1), img(1), img(1), img(1)}, MaxStepImages, ""},
		{"one past the count", []route.Image{img(1), img(1), img(1), img(1), img(1)}, MaxStepImages, "1 of the cell's 5 images are not shown"},
		{"at the bytes", []route.Image{img(MaxStepImageBytes - 10), img(10)}, 2, ""},
		{"one past the bytes", []route.Image{img(MaxStepImageBytes - 10), img(11)}, 1, "1 of the cell's 2 images are not shown"},
		{"none", nil, 0, ""},
	} {
		shown, note := a.shown(tc.in)
		if len(shown) != tc.shown || (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) {
			t.Errorf("%s: %d shown, note %q", tc.name, len(shown), note)
		}
	}
	a.step.Images = false
	if shown, note := a.shown([]route.Image{img(1)}); len(shown) != 0 || !strings.Contains(note, "does not show images") {
		t.Errorf("a route without images: %d shown, note %q", len(shown), note)
	}
}
