package kiln_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/kilnrt/kiln"
)

// embeds is a type of its own that implements kiln.Value by embedding one.
type embeds struct{ kiln.String }

// notValues are values holding something that is no Value, and the type and path
// their error names.
func notValues() []struct {
	v          kiln.Value
	typ, where string
} {
	s, n := kiln.String("x"), kiln.Number(1)
	nested := func(depth int) kiln.Value {
		v := kiln.Value(&n)
		for range depth {
			v = kiln.Array{v}
		}
		return v
	}
	keyed := func(key string) kiln.Value { return kiln.NewObject(kiln.Member{Key: key, Value: &n}) }
	name64, text64 := strings.Repeat("k", 64), strings.Repeat("k ", 32)
	return []struct {
		v          kiln.Value
		typ, where string
	}{
		{&s, "*kiln.String", "$"},
		{(*kiln.Object)(nil), "*kiln.Object", "$"},
		{kiln.Array{kiln.String("a"), &n}, "*kiln.Number", "$[1]"},
		{kiln.NewObject(kiln.Member{Key: "a", Value: kiln.Array{nil, embeds{"x"}}}), "kiln_test.embeds", "$.a[1]"},
		{kiln.NewObject(kiln.Member{Key: "ok", Value: kiln.Bool(true)},
			kiln.Member{Key: "a b", Value: kiln.Array{kiln.Array{}, &kiln.Array{}}}), "*kiln.Array", `$["a b"][1]`},
		{nested(40), "*kiln.Number", "$[0][0][0][0][0][0][0][0]…(24 steps)…[0][0][0][0][0][0][0][0]"},
		{nested(16), "*kiln.Number", "$" + strings.Repeat("[0]", 16)},
		{nested(17), "*kiln.Number", "$[0][0][0][0][0][0][0][0]…(1 steps)…[0][0][0][0][0][0][0][0]"},
		{keyed(name64), "*kiln.Number", "$." + name64},
		{keyed(name64 + "k"), "*kiln.Number", "$." + name64 + "…"},
		{keyed(text64), "*kiln.Number", `$["` + text64 + `"]`},
		{keyed(text64 + "k"), "*kiln.Number", `$["` + text64 + `…"]`},
	}
}

func TestNotAValueIsAnError(t *testing.T) {
	for _, c := range notValues() {
		want := c.typ + " at " + c.where
		check := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, kiln.ErrNotValue) || !strings.HasSuffix(err.Error(), want) {
				t.Errorf("%s of %s: %v; want ErrNotValue ending %q", what, c.typ, err, want)
			}
		}
		_, err := kiln.EncodeValue(c.v)
		check("EncodeValue", err)
		_, err = kiln.Result{Status: kiln.RunOK, Value: c.v}.MarshalJSON()
		check("Result.MarshalJSON", err)
		if _, err := json.Marshal(kiln.Result{Status: kiln.RunOK, Value: c.v}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("json.Marshal of a Result holding %s: %v; want an error naming %q", c.typ, err, want)
		}
		if a, ok := c.v.(kiln.Array); ok {
			_, err := a.MarshalJSON()
			check("Array.MarshalJSON", err)
		}
		if o, ok := c.v.(kiln.Object); ok {
			_, err := json.Marshal(o)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("json.Marshal of an Object holding %s: %v; want an error naming %q", c.typ, err, want)
			}
		}
	}
}

func TestBindingReplyNotAValue(t *testing.T) {
	t.Parallel()
	n := kiln.Number(2)
	res, err := kiln.Run(context.Background(), kiln.Program{Source: `
try:
    await t.bad()
except RuntimeError as e:
    return str(e)`, Namespaces: []kiln.Namespace{{Global: "t", Funcs: map[string]kiln.Func{
		"bad": func(context.Context, kiln.Value) (kiln.Value, error) {
			return kiln.NewObject(kiln.Member{Key: "n", Value: &n}), nil
		},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	want := kiln.String(kiln.ErrNotValue.Error() + ": *kiln.Number at $.n")
	if res.Status != kiln.RunOK || res.Value != want {
		t.Errorf("a binding replying with a pointer: %s %v %s; want the call rejected with %q", res.Status, res.Value, res.Error, want)
	}
}
