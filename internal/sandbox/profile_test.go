package sandbox

import (
	"errors"
	"testing"
)

func TestParseProfile(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Profile
		err  bool
	}{
		{"", Profile{Name: ProfileWorkspace}, false},
		{"workspace", Profile{Name: ProfileWorkspace}, false},
		{"strict", Profile{Name: ProfileStrict}, false},
		{"none", Profile{Name: ProfileNone}, false},
		{"workspace:best-effort", Profile{Name: ProfileWorkspace, BestEffort: true}, false},
		{"strict:best-effort", Profile{Name: ProfileStrict, BestEffort: true}, false},
		{"none:best-effort", Profile{}, true},
		{"Workspace", Profile{}, true},
		{"workspace:", Profile{}, true},
		{"host", Profile{}, true},
	} {
		got, err := ParseProfile(c.in)
		if c.err != (err != nil) || got != c.want {
			t.Errorf("ParseProfile(%q) = %+v, %v; want %+v, error %v", c.in, got, err, c.want, c.err)
		}
		if err != nil && !errors.Is(err, ErrProfile) {
			t.Errorf("ParseProfile(%q): %v is not ErrProfile", c.in, err)
		}
		if err == nil && c.in != "" && got.String() != c.in {
			t.Errorf("ParseProfile(%q).String() = %q", c.in, got.String())
		}
	}
}

func TestParseNetwork(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      bool
	}{
		{"", "host", false},
		{"host", "host", false},
		{"none", "none", false},
		{"443", "443", false},
		{"443, 80,443", "80,443", false},
		{"65535", "65535", false},
		{"65536", "", true},
		{"0", "", true},
		{"80,", "", true},
		{"all", "", true},
	} {
		got, err := ParseNetwork(c.in)
		if c.err != (err != nil) || err == nil && got.String() != c.want {
			t.Errorf("ParseNetwork(%q) = %v, %v; want %q, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

func FuzzParseNetwork(f *testing.F) {
	for _, s := range []string{"host", "none", "80,443", "1,,2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseNetwork(s)
		if err != nil {
			return
		}
		again, err := ParseNetwork(n.String())
		if err != nil || again.String() != n.String() {
			t.Errorf("%q → %q → %q, %v", s, n, again, err)
		}
	})
}
