package program

import "testing"

// TestColdChildImports checks what a cold child has imported once its program runs: the
// kiln package from its archive, and neither re nor ast nor what they bring, which a
// cold start would pay for.
func TestColdChildImports(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{Precompile: true})
	res := run(t, r, nil, testLimits, `import sys
return [m for m in ("re", "ast", "enum", "importlib") if m in sys.modules] + [type(sys.modules["kiln.program"].__loader__).__name__]`)
	wantValue(t, res, `["zipimporter"]`)
}
