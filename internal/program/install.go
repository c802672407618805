package program

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kilnrt/kiln/python"
)

// compileTimeout bounds the one-off compilation of the kiln package.
const compileTimeout = 60 * time.Second

// compile is the -c program that compiles the kiln package under argv[1] to bytecode
// that the interpreter loads without checking it against its source, then imports
// the bootstrap and prints the kiln modules it loaded, one a line.
const compile = `import compileall, os, py_compile, sys
ok = compileall.compile_dir(os.path.join(sys.argv[1], "kiln"), quiet=2,
                            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
if not ok:
    sys.exit(1)
sys.path.insert(0, sys.argv[1])
import kiln.program
print("\n".join(m for m in sys.modules if m == "kiln" or m.startswith("kiln.")))`

// An installer writes the kiln Python package into each child's directory. Without
// files it writes the embedded sources, which the child then compiles as it imports
// them; with files it writes a copy made once of the modules the bootstrap imports,
// bytecode included, so that each child spares the compilation and the host writes
// and removes fewer files. Every child gets its own copy either way: a program that
// rewrites its bootstrap spoils only its own run.
type installer struct {
	files []installFile // directories first
}

type installFile struct {
	path string // relative, slash-separated
	dir  bool
	data []byte
}

// newInstaller returns an installer; precompile compiles the package once with
// pythonPath first.
func newInstaller(ctx context.Context, pythonPath string, precompile bool) (*installer, error) {
	if !precompile {
		return &installer{}, nil
	}
	tmp, err := os.MkdirTemp("", "kiln-program-template-")
	if err != nil {
		return nil, fmt.Errorf("program: template directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := python.Install(tmp); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, compileTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, pythonPath, "-I", "-c", compile, tmp)
	cmd.Env = []string{"PATH=" + childPath, "LANG=C.UTF-8", "HOME=" + tmp, "TMPDIR=" + tmp}
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("program: compiling the kiln package: %w: %s", err, bytes.TrimSpace(errs.Bytes()))
	}
	needed := map[string]bool{} // module file stems: "__init__", "program", …
	for _, m := range strings.Fields(out.String()) {
		if m == "kiln" {
			needed["__init__"] = true
		} else {
			needed[strings.TrimPrefix(m, "kiln.")] = true
		}
	}
	if !needed["program"] {
		return nil, fmt.Errorf("program: compiling the kiln package: unexpected module list %q", out.String())
	}
	in := &installer{}
	err = filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == tmp {
			return err
		}
		rel, _ := filepath.Rel(tmp, path)
		stem, _, _ := strings.Cut(d.Name(), ".") // program.py, program.cpython-311.pyc
		if !d.IsDir() && !needed[stem] {
			return nil
		}
		f := installFile{path: filepath.ToSlash(rel), dir: d.IsDir()}
		if !f.dir {
			if f.data, err = os.ReadFile(path); err != nil {
				return err
			}
		}
		in.files = append(in.files, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("program: reading the compiled package: %w", err)
	}
	return in, nil
}

// install writes the package into dir, as dir/kiln/….
func (in *installer) install(dir string) error {
	if len(in.files) == 0 {
		if err := python.Install(dir); err != nil {
			return fmt.Errorf("program: installing the kiln package: %w", err)
		}
		return nil
	}
	for _, f := range in.files {
		path := filepath.Join(dir, filepath.FromSlash(f.path))
		var err error
		if f.dir {
			err = os.Mkdir(path, 0o700)
		} else {
			err = os.WriteFile(path, f.data, 0o600)
		}
		if err != nil {
			return fmt.Errorf("program: installing the kiln package: %w", err)
		}
	}
	return nil
}
