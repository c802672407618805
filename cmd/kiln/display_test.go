package main

import (
	"bytes"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// debianPython is the interpreter Debian's python3-matplotlib installs into.
const debianPython = "/usr/bin/python3"

// TestMatplotlibShowsPNG draws with matplotlib through --python, headless: plt.show()
// and a figure as the cell's value each give a display with image/png.
func TestMatplotlibShowsPNG(t *testing.T) {
	t.Parallel()
	if err := exec.Command(debianPython, "-c", "import matplotlib").Run(); err != nil {
		t.Skipf("%s -c 'import matplotlib' fails (%v): install python3-matplotlib to run this test", debianPython, err)
	}
	out := clitest.Out(t, "exec", "--data", t.TempDir(), "--python", debianPython, "--json",
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

// TestExecWritesDisplayedImages runs kiln exec in human mode: a displayed PNG goes to a
// file under the data directory, named with its size; a display without an image shows
// its text.
func TestExecWritesDisplayedImages(t *testing.T) {
	data := t.TempDir()
	out := clitest.Out(t, "exec", "--data", data, `
import struct, zlib
class Pic:
    def __repr__(self): return "Pic()"
    def _repr_png_(self):
        ihdr = struct.pack(">IIBBBBB", 3, 2, 8, 0, 0, 0, 0)
        return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
class Page:
    def __repr__(self): return "Page()"
    def _repr_html_(self): return "<p/>"
display(Pic(), Page())`)
	prefix := "[image/png 3×2 → " + filepath.Join(data, "display") + string(filepath.Separator)
	first, rest, _ := strings.Cut(out, "\n")
	if !strings.HasPrefix(first, prefix) || !strings.HasSuffix(first, ".png]") || rest != "Page()\n" {
		t.Fatalf("printed %q; want %q…, then Page()", out, prefix)
	}
	png, err := os.ReadFile(strings.TrimSuffix(strings.TrimPrefix(first, "[image/png 3×2 → "), "]"))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("the image file: %v", err)
	}
}

func TestPNGSize(t *testing.T) {
	header := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x02\x80\x00\x00\x01\xe0")
	if w, h, ok := pngSize(header); !ok || w != 640 || h != 480 {
		t.Errorf("got %d×%d %v; want 640×480", w, h, ok)
	}
	if _, _, ok := pngSize(header[:23]); ok {
		t.Error("a header one byte short has a size")
	}
	if _, _, ok := pngSize(append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDX"), header[16:]...)); ok {
		t.Error("a first chunk other than IHDR has a size")
	}
}

// TestDisplaysKeepTheirPlace prints, displays, writes stderr and ends with a value: the
// record of kiln exec --json --stream has them in the order made, its output events are
// that record's output up to its result, and the durable record, read back with kiln
// log, is the same. With Debian's matplotlib, plt.show() takes its place too.
func TestDisplaysKeepTheirPlace(t *testing.T) {
	t.Parallel()
	python, show := "python3", ""
	if exec.Command(debianPython, "-c", "import matplotlib").Run() == nil {
		python, show = debianPython, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nprint('c')\n"
	}
	data := t.TempDir()
	// matplotlib keeps its configuration in the home directory, which a sandbox hides
	// (it would warn on stderr, out of the order checked): the cells run unconfined.
	out := clitest.Out(t, "exec", "--data", data, "--session", "s", "--python", python, "--sandbox", "none", "--json", "--stream", `import sys
class H:
    def __repr__(self): return "H()"
    def _repr_html_(self): return "<b>h</b>"
print("a")
display(H())
print("e", file=sys.stderr)
print("b")
`+show+"H()")
	type output struct {
		Stream string            `json:"stream"`
		Text   string            `json:"text,omitempty"`
		Data   map[string]string `json:"data,omitempty"`
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var events []output
	for _, line := range lines[:len(lines)-1] {
		var e struct {
			Event string `json:"event"`
			ID    string `json:"id"`
			output
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Event != "output" {
			t.Fatalf("event %s: %v", line, err)
		}
		events = append(events, e.output)
	}
	var rec struct {
		Status string   `json:"status"`
		Output []output `json:"output"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec, json.RejectUnknownMembers(false)); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, o := range rec.Output {
		order = append(order, o.Stream+":"+strings.TrimSpace(o.Text))
	}
	want := "stdout:a display: stderr:e stdout:b display: result:H()"
	if show != "" {
		want = "stdout:a display: stderr:e stdout:b display: stdout:c display: result:H()"
	}
	if got := strings.Join(order, " "); rec.Status != "ok" || got != want {
		t.Fatalf("got %s %s; want ok %s", rec.Status, got, want)
	}
	if n := len(rec.Output) - 1; !reflect.DeepEqual(events, rec.Output[:n]) {
		t.Errorf("the events are not the record's output:\n%v\n%v", events, rec.Output[:n])
	}
	for _, line := range strings.Split(clitest.Out(t, "log", "--json", "--data", data, "--session", "s"), "\n") {
		var e struct {
			Kind   string `json:"kind"`
			Record struct {
				Output []output `json:"output"`
			} `json:"record"`
		}
		if json.Unmarshal([]byte(line), &e, json.RejectUnknownMembers(false)) == nil && e.Kind == "execution.end" {
			if !reflect.DeepEqual(e.Record.Output, rec.Output) {
				t.Errorf("the durable record's output is %v; want %v", e.Record.Output, rec.Output)
			}
			return
		}
	}
	t.Error("kiln log shows no execution.end")
}
