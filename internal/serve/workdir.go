package serve

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kilnrt/kiln/internal/datadir"
)

// workDir is the directory session cfg's cells run in, which is also the root of its
// workspace.* services and of its files: the session's own directory under the data
// directory (datadir.SessionWork), made 0700 at its opening; or the client's cwd,
// which must resolve, its symbolic links followed, inside the daemon's WorkspaceRoot.
// Without a WorkspaceRoot a client's cwd is refused. A guest keeps its sessions in its
// workspace (or the cwd a client names), as one user's own tool; it returns "".
func (d *Daemon) workDir(cfg Config) (string, error) {
	if d.opts.Guest {
		return d.guestDir(cfg)
	}
	if cfg.Cwd == "" {
		return datadir.MakeSessionWork(d.opts.Dir, cfg.ID)
	}
	if d.opts.WorkspaceRoot == "" {
		return "", fmt.Errorf("%w: cwd %q: this daemon gives each session a directory of its own, and takes a client's cwd only inside a root its operator allows (kiln serve --workspace-root DIR)", ErrInvalid, cfg.Cwd)
	}
	root, err := filepath.EvalSymlinks(d.opts.WorkspaceRoot)
	if err != nil {
		return "", fmt.Errorf("serve: the workspace root: %w", err)
	}
	dir := cfg.Cwd
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("%w: cwd %q is not a directory", ErrInvalid, cfg.Cwd)
	}
	if real != root && !strings.HasPrefix(real, strings.TrimSuffix(root, "/")+"/") {
		return "", fmt.Errorf("%w: cwd %q is %s, outside the workspace root %s (kiln serve --workspace-root)", ErrInvalid, cfg.Cwd, real, root)
	}
	return real, checkDir(cfg.Cwd, real)
}

// guestDir is the directory of a guest's session: the client's cwd, relative to the
// workspace, or "" for the workspace itself.
func (d *Daemon) guestDir(cfg Config) (string, error) {
	if cfg.Cwd == "" {
		return "", nil
	}
	dir := cfg.Cwd
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(d.opts.Workspace, dir)
	}
	return dir, checkDir(cfg.Cwd, dir)
}

// checkDir checks that dir, the client's cwd, is a directory that may hold a session's
// files.
func checkDir(cwd, dir string) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: cwd %q is not a directory", ErrInvalid, cwd)
	}
	if pseudoFS(dir) {
		return fmt.Errorf("%w: cwd %q is in /proc, /sys or /dev, whose files are not what they say: their sizes read 0", ErrInvalid, cwd)
	}
	return nil
}
