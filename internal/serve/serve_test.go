package serve

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/limits"
)

func TestParseExecutionID(t *testing.T) {
	for _, c := range []struct {
		id, session, cell string
		ok                bool
	}{
		{"s:c-1", "s", "c-1", true},
		{"a.b-c:c-120", "a.b-c", "c-120", true},
		{"s:c-0", "", "", false},
		{"s:c-01", "", "", false},
		{"s:c-", "", "", false},
		{"s:c-+1", "", "", false},
		{":c-1", "", "", false},
		{"c-1", "", "", false},
		{"s:x-1", "", "", false},
		{"s:c-99999999999999999999", "", "", false},
	} {
		s, cell, err := ParseExecutionID(c.id)
		if (err == nil) != c.ok || s != c.session || cell != c.cell {
			t.Errorf("ParseExecutionID(%q) = %q, %q, %v; want %q, %q, ok %v", c.id, s, cell, err, c.session, c.cell, c.ok)
		}
		if err != nil && !errors.Is(err, ErrNoCell) {
			t.Errorf("ParseExecutionID(%q): %v is not ErrNoCell", c.id, err)
		}
	}
}

func FuzzParseExecutionID(f *testing.F) {
	for _, s := range []string{"s:c-1", "a:b:c-2", "::", "s:c-18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		s, cell, err := ParseExecutionID(id)
		if err != nil {
			return
		}
		if ExecutionID(s, cell) != id || !validCell(cell) || s == "" {
			t.Fatalf("%q parsed as %q, %q", id, s, cell)
		}
	})
}

func TestLimitsAtTheBound(t *testing.T) {
	if err := checkLimits(limits.Session{IdleTimeoutMS: limits.MaxMS}); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	if err := checkLimits(limits.Session{InterruptGraceMS: limits.MaxMS + 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("one past: %v", err)
	}
}

func TestStatesSkipTheUnreadable(t *testing.T) {
	dir := t.TempDir()
	st := states{dir: dir}
	if err := st.save(state{Config: Config{ID: "a"}, State: StateOpen}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(dir+"/b.json", []byte("{"), 0o600)
	os.WriteFile(dir+"/c.json", []byte(`{"config":{"id":"other"},"state":"open"}`), 0o600)
	os.WriteFile(dir+"/.session-123", []byte("half"), 0o600)
	got, errs := st.load()
	if len(got) != 1 || got[0].Config.ID != "a" || len(errs) != 2 {
		t.Fatalf("load: %+v, %v", got, errs)
	}
	if _, err := os.Stat(dir + "/.session-123"); !os.IsNotExist(err) {
		t.Errorf("a half-written file is left: %v", err)
	}
}

// TestLeaseTTLIsBounded: a lease term is MinLeaseTTL..MaxLeaseTTL, on a shared record
// only; Start refuses another before it opens anything.
func TestLeaseTTLIsBounded(t *testing.T) {
	for _, c := range []struct {
		ttl    time.Duration
		shared bool
		ok     bool
	}{{0, false, true}, {0, true, true}, {MinLeaseTTL, true, true}, {MaxLeaseTTL, true, true},
		{MinLeaseTTL - time.Millisecond, true, false}, {MaxLeaseTTL + time.Millisecond, true, false},
		{DefaultLeaseTTL, false, false}} {
		if err := CheckLeaseTTL(c.ttl, c.shared); (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("a term of %s, shared %v: %v; want ok %v", c.ttl, c.shared, err, c.ok)
		}
	}
	_, err := Start(t.Context(), Options{Dir: t.TempDir(), LeaseTTL: time.Minute})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "record daemons share") {
		t.Errorf("a term on the SQLite record: %v; want it refused", err)
	}
}
