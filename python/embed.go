// Package python carries kiln's Python side — the workbench worker and its wire
// vocabulary, standard library only — embedded in the kiln binary, and installs it where
// a child interpreter can import it.
package python

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed kiln/*.py
var files embed.FS

// Install writes the kiln package under dir, as dir/kiln/…, so that an interpreter with
// dir on its sys.path can import it. dir must exist.
func Install(dir string) error {
	return fs.WalkDir(files, "kiln", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		data, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(target, data, 0o600); err != nil {
			return fmt.Errorf("python: install %s: %w", name, err)
		}
		return nil
	})
}
