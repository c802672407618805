package python

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	pathpkg "path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// compileTimeout bounds the one-off compilation of the Python packages.
const compileTimeout = 60 * time.Second

// compile is the -c program that compiles the packages under argv[1] to bytecode that the
// interpreter loads without checking it against its source, imports each module named in
// argv[2] (comma-separated), and prints the modules of the packages those imports loaded,
// one a line.
const compile = `import compileall, importlib, os, py_compile, sys
packages = ("kiln", "kiln_hooks")
for package in packages:
    ok = compileall.compile_dir(os.path.join(sys.argv[1], package), quiet=2,
                                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    if not ok:
        sys.exit(1)
sys.path.insert(0, sys.argv[1])
for module in sys.argv[2].split(","):
    importlib.import_module(module)
print("\n".join(m for m in sys.modules if m.split(".")[0] in packages))`

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

// Precompiled compiles the packages once with the interpreter at pythonPath and returns
// an Installer of just the modules that importing modules loads, bytecode included, so
// that each child spares the compilation and fewer files are written. A child that
// imports a module only when it needs it must name that module here too.
func Precompiled(ctx context.Context, pythonPath string, modules ...string) (*Installer, error) {
	bytecode, loaded, err := compileModules(ctx, pythonPath, modules)
	if err != nil {
		return nil, err
	}
	maps.DeleteFunc(bytecode, func(path string, _ []byte) bool { return !loaded[moduleFile(path)] })
	return withBytecode(bytecode)
}

// compileModules compiles the packages with the interpreter at pythonPath and returns the
// bytecode of every module of them, by path ("kiln/__pycache__/…"), and the modules that
// importing modules loads ("kiln/__init__", "kiln/worker", …).
func compileModules(ctx context.Context, pythonPath string, modules []string) (bytecode map[string][]byte, loaded map[string]bool, err error) {
	tmp, err := os.MkdirTemp("", "kiln-python-template-")
	if err != nil {
		return nil, nil, fmt.Errorf("python: template directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := Install(tmp); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, compileTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, pythonPath, "-I", "-S", "-c", compile, tmp, strings.Join(modules, ","))
	cmd.Env = []string{"LANG=C.UTF-8", "HOME=" + tmp, "TMPDIR=" + tmp}
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("python: compiling the Python packages: %w: %s", err, bytes.TrimSpace(errs.Bytes()))
	}
	loaded = map[string]bool{}
	for _, m := range strings.Fields(out.String()) {
		name := strings.ReplaceAll(m, ".", "/")
		if slices.Contains(packages, m) {
			name += "/__init__"
		}
		loaded[name] = true
	}
	bytecode = map[string][]byte{}
	err = filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".pyc" {
			return err
		}
		rel, _ := filepath.Rel(tmp, path)
		bytecode[filepath.ToSlash(rel)], err = os.ReadFile(path)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("python: reading the compiled packages: %w", err)
	}
	return bytecode, loaded, nil
}

// withBytecode returns an Installer of the modules bytecode holds ("kiln/__pycache__/
// worker.cpython-311.pyc", …): each one's embedded source and its bytecode. A path that
// is not the bytecode of an embedded module is an error.
func withBytecode(bytecode map[string][]byte) (*Installer, error) {
	in := &Installer{}
	dirs := map[string]bool{}
	for _, path := range slices.Sorted(maps.Keys(bytecode)) {
		dir, name := pathpkg.Split(path)
		source := moduleFile(path) + ".py"
		data, err := files.ReadFile(source)
		if err != nil || !fs.ValidPath(path) || pathpkg.Base(dir) != "__pycache__" || !strings.HasSuffix(name, ".pyc") {
			return nil, fmt.Errorf("python: %q is not the bytecode of a module of the packages", path)
		}
		for d := pathpkg.Dir(path); d != "."; d = pathpkg.Dir(d) {
			dirs[d] = true
		}
		in.files = append(in.files, File{Path: source, Data: data}, File{Path: path, Data: bytecode[path]})
	}
	// Directories first, each before its children, as a path sorts before its extensions.
	var entries []File
	for _, dir := range slices.Sorted(maps.Keys(dirs)) {
		entries = append(entries, File{Path: dir, Dir: true})
	}
	in.files = append(entries, in.files...)
	return in, nil
}

// moduleFile is the module a package file holds, as "kiln/worker": for kiln/worker.py
// and for kiln/__pycache__/worker.cpython-311.pyc alike.
func moduleFile(path string) string {
	dir, name := filepath.Split(filepath.FromSlash(path))
	dir = strings.TrimSuffix(filepath.ToSlash(dir), "/")
	dir = strings.TrimSuffix(dir, "/__pycache__")
	stem, _, _ := strings.Cut(name, ".")
	return dir + "/" + stem
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

// ArchiveName is the file an archive is installed as, in a child's directory.
const ArchiveName = "python.zip"

// Archive returns the files of in as one zip archive, stored uncompressed, each module's
// bytecode beside its source (kiln/worker.pyc), where python's zip importer looks for it.
// With the archive's path on sys.path a child imports the packages from it: one file to
// write and remove, where a directory takes one for each module and their directories.
func (in *Installer) Archive() ([]byte, error) {
	size := 0 // of the archive, about: written in one buffer
	for _, f := range in.files {
		size += len(f.Data) + 2*len(f.Path) + 128
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	zw := zip.NewWriter(buf)
	for _, f := range in.files {
		if f.Dir {
			continue
		}
		name := f.Path
		if strings.HasSuffix(name, ".pyc") {
			name = moduleFile(name) + ".pyc"
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		if err == nil {
			_, err = w.Write(f.Data)
		}
		if err != nil {
			return nil, fmt.Errorf("python: archiving the Python packages: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("python: archiving the Python packages: %w", err)
	}
	return buf.Bytes(), nil
}
