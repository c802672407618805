package python

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// compileTimeout bounds the one-off compilation of the Python packages.
const compileTimeout = 60 * time.Second

// compile is the -c program that compiles the packages argv[3:] under argv[1] to bytecode
// that the interpreter loads without checking it against its source, then imports
// argv[2], to prove the packages load with this interpreter.
const compile = `import compileall, importlib, os, py_compile, sys
for package in sys.argv[3:]:
    ok = compileall.compile_dir(os.path.join(sys.argv[1], package), quiet=2,
                                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    if not ok:
        sys.exit(1)
sys.path.insert(0, sys.argv[1])
importlib.import_module(sys.argv[2])`

// An Installer writes a copy of the kiln and kiln_hooks packages into each child's
// directory: every child gets its own, so a program that rewrites its bootstrap spoils
// only its own run.
type Installer struct {
	files []File // directories first
}

// File is one entry an Installer writes.
type File struct {
	Path string // relative, slash-separated
	Dir  bool
	Data []byte
}

// NewInstaller returns an Installer that writes files.
func NewInstaller(files []File) *Installer { return &Installer{files: files} }

// Sources returns an Installer of the embedded sources of every package, which a child
// compiles as it imports them.
func Sources() *Installer {
	var in Installer
	for _, pkg := range packages {
		fs.WalkDir(files, pkg, func(name string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			f := File{Path: name, Dir: d.IsDir()}
			if !f.Dir {
				f.Data, _ = files.ReadFile(name)
			}
			in.files = append(in.files, f)
			return nil
		})
	}
	return &in
}

// Precompiled compiles the kiln and kiln_hooks packages once with the interpreter at
// pythonPath, checks that module imports, and returns an Installer of the packages with
// their bytecode, so that each child spares the compilation. Every module is installed,
// also those a child imports only when it needs them.
func Precompiled(ctx context.Context, pythonPath, module string) (*Installer, error) {
	tmp, err := os.MkdirTemp("", "kiln-python-template-")
	if err != nil {
		return nil, fmt.Errorf("python: template directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := Install(tmp); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, compileTimeout)
	defer cancel()
	args := append([]string{"-I", "-S", "-c", compile, tmp, module}, packages...)
	cmd := exec.CommandContext(ctx, pythonPath, args...)
	cmd.Env = []string{"LANG=C.UTF-8", "HOME=" + tmp, "TMPDIR=" + tmp}
	var errs bytes.Buffer
	cmd.Stderr = &errs
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("python: compiling the Python packages: %w: %s", err, bytes.TrimSpace(errs.Bytes()))
	}
	in := &Installer{}
	err = filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == tmp {
			return err
		}
		rel, _ := filepath.Rel(tmp, path)
		f := File{Path: filepath.ToSlash(rel), Dir: d.IsDir()}
		if !f.Dir {
			if f.Data, err = os.ReadFile(path); err != nil {
				return err
			}
		}
		in.files = append(in.files, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("python: reading the compiled packages: %w", err)
	}
	return in, nil
}

// Install writes the packages into dir, as dir/kiln/… and dir/kiln_hooks/….
func (in *Installer) Install(dir string) error {
	for _, f := range in.files {
		path := filepath.Join(dir, filepath.FromSlash(f.Path))
		var err error
		if f.Dir {
			err = os.Mkdir(path, 0o700)
		} else {
			err = os.WriteFile(path, f.Data, 0o600)
		}
		if err != nil {
			return fmt.Errorf("python: installing the Python packages: %w", err)
		}
	}
	return nil
}
