package main

import (
	"bytes"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// TestExecWritesDisplayedImages runs kiln exec in human mode: a displayed PNG goes to a
// file under the data directory, named with its size; a display without an image shows
// its text.
func TestExecWritesDisplayedImages(t *testing.T) {
	data := t.TempDir()
	out := kilnOut(t, "exec", "--data", data, `
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
