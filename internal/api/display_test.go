package api_test

import (
	"bytes"
	"encoding/base64"
	"image/png"
	"net/http"
	"testing"

	kilndaemon "github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/api"
)

// pngCell makes a 2x1 grey PNG with the standard library, shows it and some HTML.
const pngCell = `import struct, zlib
def chunk(kind, body):
    return struct.pack('>I', len(body)) + kind + body + struct.pack('>I', zlib.crc32(kind + body))
PNG = (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 2, 1, 8, 0, 0, 0, 0)) +
       chunk(b'IDAT', zlib.compress(b'\x00\x80\x40')) + chunk(b'IEND', b''))
class Grey:
    def _repr_png_(self): return PNG
class Page:
    def _repr_html_(self): return '<p>hi</p>'
display(Grey(), Page())
`

func TestDisplayItemOverHTTP(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	d.create("s")
	_, rec := d.execute("s", pngCell, 30000)
	if rec.Status != "ok" {
		t.Fatalf("the cell: %+v", rec)
	}
	resp, data := d.do("GET", "/v1/executions/s:c-1", nil)
	var full struct {
		Output []struct {
			Stream string            `json:"stream"`
			Data   map[string]string `json:"data"`
		} `json:"output"`
	}
	d.want(resp, data, 200, &full)
	var want []byte
	for _, o := range full.Output {
		if o.Stream == "display" && want == nil {
			want, _ = base64.StdEncoding.DecodeString(o.Data["image/png"])
		}
	}

	resp, data = d.do("GET", "/v1/executions/s:c-1/display/0", nil)
	d.want(resp, data, 200, nil)
	if ct := resp.Header.Get("Content-Type"); ct != "image/png" || !bytes.Equal(data, want) || len(want) == 0 {
		t.Fatalf("display 0: %s, %d bytes, want %d", ct, len(data), len(want))
	}
	if img, err := png.Decode(bytes.NewReader(data)); err != nil || img.Bounds().Dx() != 2 {
		t.Errorf("not the PNG: %v", err)
	}
	resp, data = d.do("GET", "/v1/executions/s:c-1/display/1", nil)
	d.want(resp, data, 200, nil)
	if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" || string(data) != "<p>hi</p>" ||
		resp.Header.Get("Content-Security-Policy") != "sandbox" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("display 1: %s %q %v", ct, data, resp.Header)
	}
	resp, data = d.do("HEAD", "/v1/executions/s:c-1/display/0", nil)
	d.want(resp, data, 200, nil)

	for path, code := range map[string]string{
		"/v1/executions/s:c-1/display/2":  api.CodeNoDisplay,
		"/v1/executions/s:c-1/display/-1": api.CodeNoDisplay,
		"/v1/executions/s:c-1/display/x":  api.CodeNoDisplay,
		"/v1/executions/s:c-1/display/00": api.CodeNoDisplay,
		"/v1/executions/s:c-7/display/0":  api.CodeNoExecution,
		"/v1/executions/t:c-1/display/0":  api.CodeNoSession,
	} {
		resp, data := d.do("GET", path, nil)
		var p api.Problem
		d.want(resp, data, http.StatusNotFound, &p)
		if p.Code != code {
			t.Errorf("%s: %s, want %s", path, p.Code, code)
		}
	}
}
