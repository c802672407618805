package main

import (
	"bytes"
	"encoding/base64"
	"os/exec"
	"testing"

	"github.com/go-json-experiment/json"
)

// debianPython is the interpreter Debian's python3-matplotlib installs into.
const debianPython = "/usr/bin/python3"

// TestMatplotlibShowsPNG draws with matplotlib through --python, headless: plt.show()
// and a figure as the cell's value each give a display with image/png.
func TestMatplotlibShowsPNG(t *testing.T) {
	if err := exec.Command(debianPython, "-c", "import matplotlib").Run(); err != nil {
		t.Skipf("%s -c 'import matplotlib' fails (%v): install python3-matplotlib to run this test", debianPython, err)
	}
	out := kilnOut(t, "exec", "--data", t.TempDir(), "--python", debianPython, "--json",
		"import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nfig = plt.figure(figsize=(2, 1), dpi=100)\nfig")
	var rec struct {
		Status string `json:"status"`
		Output []struct {
			Stream string            `json:"stream"`
			Data   map[string]string `json:"data"`
		} `json:"output"`
	}
	if err := json.Unmarshal([]byte(out), &rec, json.RejectUnknownMembers(false)); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var pngs [][]byte
	for _, o := range rec.Output {
		if o.Stream != "display" {
			continue
		}
		png, err := base64.StdEncoding.DecodeString(o.Data["image/png"])
		if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || o.Data["text/plain"] == "" {
			t.Fatalf("display %v: not a PNG with its text (%v)", o.Data["text/plain"], err)
		}
		pngs = append(pngs, png)
	}
	if rec.Status != "ok" || len(pngs) != 2 {
		t.Fatalf("got %s with %d PNG displays; want ok with 2: %s", rec.Status, len(pngs), out)
	}
}
