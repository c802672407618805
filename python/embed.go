// Package python carries kiln's Python side, standard library only, embedded in the kiln
// binary: the kiln package — the workbench and hooks workers, the fd-3 program bootstrap
// and their wire vocabularies — and kiln_hooks, the SDK that policy hooks import. It
// installs both where a child interpreter imports them, and says how to start that
// interpreter.
package python

import (
	"embed"
	"strconv"
)

//go:embed kiln/*.py kiln_hooks/*.py
var files embed.FS

// packages are the Python packages embedded in files, each a directory at its root.
var packages = []string{"kiln", "kiln_hooks"}

// launcher is the -c program every kiln child starts with. The interpreter runs with -I
// -S: isolated from the user's environment variables and user site, and without the .pth
// hooks of site-packages, which would run arbitrary code at every start. The
// installation's site-packages directories are still put on sys.path, so installed
// packages import, and the builtins site would add (exit, quit, help, …) are added.
// The interpreter of a virtual environment (a pyvenv.cfg beside its executable or one
// directory up) gets the environment's site-packages, and sys.prefix, as site would set
// them; the base installation's too only when the environment includes them. Its
// arguments are the packages' directory, a gate ("-", or a file descriptor to wait on:
// see GatedArgs), the module, and the module's own.
const launcher = `import sys
if sys.version_info < (3, 10):
    sys.exit("kiln: python 3.10 or newer is required, found " + sys.version.split()[0])
import os, site
site.setquit(); site.setcopyright(); site.sethelper()
def venv_prefixes():
    bindir = os.path.dirname(os.path.abspath(sys.executable))
    for cfg in (os.path.join(bindir, "pyvenv.cfg"), os.path.join(os.path.dirname(bindir), "pyvenv.cfg")):
        if os.path.isfile(cfg):
            system = False
            with open(cfg, encoding="utf-8", errors="replace") as f:
                for line in f:
                    key, eq, value = line.partition("=")
                    if eq and key.strip().lower() == "include-system-site-packages":
                        system = value.strip().lower() == "true"
            sys.prefix = sys.exec_prefix = os.path.dirname(cfg)
            return [sys.prefix] + (site.PREFIXES if system else [])
    return None
sys.path.extend(p for p in site.getsitepackages(venv_prefixes()) if p not in sys.path)
del venv_prefixes
if sys.argv[2] != "-":
    os.read(int(sys.argv[2]), 1)
    os.close(int(sys.argv[2]))
sys.path.insert(0, sys.argv[1])
__import__(sys.argv[3])
sys.modules[sys.argv[3]].main(sys.argv[4:])
`

// Args returns the interpreter arguments that run module's main(argv) — module is
// "kiln.worker", "kiln.hooks" or "kiln.program" — from the packages installed under dir.
func Args(dir, module string, argv ...string) []string {
	return append([]string{"-I", "-S", "-c", launcher, dir, "-", module}, argv...)
}

// GatedArgs is Args for packages the host is still writing under dir as the interpreter
// starts: the launcher, once the interpreter and site are set up, reads one byte or the
// end from the child's file descriptor gate, closes it, and only then imports from dir.
// The host closes its end once the packages are whole, so that the two overlap.
func GatedArgs(dir string, gate int, module string, argv ...string) []string {
	return append([]string{"-I", "-S", "-c", launcher, dir, strconv.Itoa(gate), module}, argv...)
}

// Install writes the embedded sources of the kiln and kiln_hooks packages under dir, as
// dir/kiln/… and dir/kiln_hooks/…, so that an interpreter with dir on its sys.path can
// import them. dir must exist.
func Install(dir string) error {
	return Sources().Install(dir)
}
