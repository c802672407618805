package wait

import (
	"math"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

func TestCheckSeconds(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64 // -1: null accepted; -2: refused
	}{
		{"", -1}, {"null", -1},
		{"600", 600}, {"600.0000001", -2}, {"601", -2},
		{"0.001", 0.001}, {"0", -2}, {"-0", -2}, {"-1", -2},
		{"1e400", -2}, {`"5"`, -2}, {"true", -2}, {"[]", -2}, {"{}", -2},
	} {
		got, msg := checkSeconds(jsontext.Value(c.in))
		switch {
		case c.want == -1 && (got != nil || msg != ""):
			t.Errorf("%q: got %v %q; want null accepted", c.in, got, msg)
		case c.want == -2 && msg == "":
			t.Errorf("%q: got %v; want refused", c.in, *got)
		case c.want >= 0 && (got == nil || *got != c.want):
			t.Errorf("%q: got %v %q; want %v", c.in, got, msg, c.want)
		}
	}
}

func FuzzCheckSeconds(f *testing.F) {
	for _, s := range []string{"null", "600", "601", "0", "-1", "1e400", "0.5", `"x"`, "1e-400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, msg := checkSeconds(jsontext.Value(in))
		if got != nil && (msg != "" || math.IsNaN(*got) || *got <= 0 || *got > MaxSeconds) {
			t.Errorf("%q accepted as %v", in, *got)
		}
	})
}
