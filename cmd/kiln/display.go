package main

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kilnrt/kiln"
)

// imageDir is where kiln writes the images cells display, under the data directory.
func imageDir(dataDir string) string { return filepath.Join(dataDir, "display") }

// workbenchImages is imageDir of wb's data directory; with an ephemeral record, a
// directory under the system's temporary one.
func workbenchImages(wb *kiln.Workbench) string {
	if path := wb.DataPath(); path != "" {
		return imageDir(filepath.Dir(path))
	}
	return filepath.Join(os.TempDir(), "kiln-display")
}

// imageTypes are the display types written to files, with their file extensions.
var imageTypes = []struct{ mime, ext string }{{"image/png", ".png"}, {"image/jpeg", ".jpg"}}

// showDisplay shows a display to a person: its first image written to a file of its own
// under dir and named on stdout, with its size for a PNG; without an image, its
// text/plain. It reports whether it named an image.
func showDisplay(stdout, stderr io.Writer, dir, cellID string, o kiln.Output) (image bool) {
	for _, t := range imageTypes {
		b64, ok := o.Data[t.mime]
		if !ok {
			continue
		}
		path, size, err := writeImage(dir, cellID, t.ext, b64)
		if err != nil {
			fmt.Fprintf(stderr, "[kiln] %s of cell %s not written: %v\n", t.mime, cellID, err)
			break
		}
		fmt.Fprintf(stdout, "[%s%s → %s]\n", t.mime, size, path)
		return true
	}
	io.WriteString(stdout, o.Data["text/plain"])
	io.WriteString(stdout, "\n")
	return false
}

// writeImage decodes an image and writes it to a new file under dir; it returns the
// file's path and, for a PNG, " W×H" as its header says.
func writeImage(dir, cellID, ext, b64 string) (path, size string, err error) {
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", "", fmt.Errorf("display: decode: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("display: %w", err)
	}
	f, err := os.CreateTemp(dir, cellID+"-*"+ext)
	if err != nil {
		return "", "", fmt.Errorf("display: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", "", fmt.Errorf("display: write: %w", err)
	}
	if w, h, ok := pngSize(data); ok {
		size = fmt.Sprintf(" %d×%d", w, h)
	}
	return f.Name(), size, nil
}

// pngSize reads a PNG's width and height from its IHDR chunk, the first after the signature.
func pngSize(data []byte) (width, height uint32, ok bool) {
	const signature = "\x89PNG\r\n\x1a\n"
	if len(data) < 24 || string(data[:8]) != signature || string(data[12:16]) != "IHDR" {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(data[16:20]), binary.BigEndian.Uint32(data[20:24]), true
}
