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

// TestLacks names what a host cannot give a profile: nothing when it gives it all,
// each missing piece otherwise, and nothing for none.
func TestLacks(t *testing.T) {
	full := Mechanisms{Landlock: 7, Seccomp: true, Namespaces: true, ProcMount: true}
	for _, c := range []struct {
		name string
		mech Mechanisms
		pol  Policy
		want int
	}{
		{"all of workspace, but cgroups", full, Policy{Profile: Profile{Name: ProfileWorkspace}}, 1},
		{"none", Mechanisms{}, Policy{Profile: Profile{Name: ProfileNone}}, 0},
		{"no namespaces, no Landlock", Mechanisms{Seccomp: true}, Policy{Profile: Profile{Name: ProfileWorkspace}}, 3},
		{"strict without namespaces", Mechanisms{Landlock: 7, Seccomp: true}, Policy{Profile: Profile{Name: ProfileStrict}}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &Host{mech: c.mech}
			got, err := h.Lacks(c.pol)
			if err != nil || len(got) != c.want {
				t.Errorf("Lacks = %q, %v; want %d pieces", got, err, c.want)
			}
		})
	}
	h := &Host{mech: full}
	if _, err := h.Lacks(Policy{Profile: Profile{Name: ProfileStrict}, Network: Network{Mode: NetworkPorts, Ports: []uint16{80}}}); !errors.Is(err, ErrProfile) {
		t.Errorf("strict with ports: %v; want ErrProfile", err)
	}
}
