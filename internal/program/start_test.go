package program

import "testing"

// TestColdChildImports checks what a cold child has imported once its program runs: the
// kiln package from its archive's bytecode, and neither re nor ast nor what they bring,
// which a cold start would pay for.
func TestColdChildImports(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{Precompile: true})
	res := run(t, r, nil, testLimits, `import sys
p = sys.modules["kiln.program"]
return [m for m in ("re", "ast", "enum", "importlib") if m in sys.modules] + [type(p.__loader__).__name__, p.__file__.endswith("/python.zip/kiln/program.pyc")]`)
	wantValue(t, res, `["zipimporter",true]`)
}
