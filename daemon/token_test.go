package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestTokenIsWholeAndOneAmongConcurrentFirstUses makes the token from many
// goroutines at once: all get one token, never an empty one, in a 0600 file.
func TestTokenIsWholeAndOneAmongConcurrentFirstUses(t *testing.T) {
	for range 20 {
		dir := t.TempDir()
		const n = 16
		toks := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { toks[i], errs[i] = Token(dir) })
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil || toks[i] == "" || toks[i] != toks[0] {
				t.Fatalf("use %d: token %q, %v; want %q", i, toks[i], errs[i], toks[0])
			}
		}
		fi, err := os.Stat(filepath.Join(dir, TokenFile))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the token file: %v, %v; want mode 0600", fi.Mode(), err)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, TokenFile+".*")); len(left) > 0 {
			t.Fatalf("files left beside the token: %v", left)
		}
	}
}

// TestAnEmptyTokenFileIsAnError checks that a token file holding only white space, or
// one that cannot be read, is ErrNoToken rather than a token "".
func TestAnEmptyTokenFileIsAnError(t *testing.T) {
	for _, content := range []string{"", "\n", "  \t\n"} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, TokenFile), []byte(content), 0o600)
		if tok, err := Token(dir); !errors.Is(err, ErrNoToken) {
			t.Errorf("token file %q: %q, %v; want ErrNoToken", content, tok, err)
		}
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, TokenFile), 0o700) // unreadable as a file
	if tok, err := Token(dir); !errors.Is(err, ErrNoToken) {
		t.Errorf("a directory for the token file: %q, %v; want ErrNoToken", tok, err)
	}
	dir = t.TempDir()
	os.WriteFile(filepath.Join(dir, TokenFile), []byte(" abc \n"), 0o600)
	if tok, err := Token(dir); tok != "abc" || err != nil {
		t.Errorf("token file \" abc \": %q, %v; want abc", tok, err)
	}
}
