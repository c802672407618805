package host

import (
	"errors"
	"testing"
)

func TestDecodeReadsParametersWithOrWithoutAny(t *testing.T) {
	type params struct {
		N int `json:"n"`
	}
	for _, c := range []struct {
		body string
		want params
		ok   bool
	}{
		{`{"method":"m"}`, params{N: 7}, true}, // nothing to read: the defaults stay
		{`{"method":"m","n":2}`, params{N: 2}, true},
		{`{"n":3,"method":"m"}`, params{N: 3}, true},
		{`{"method":"m","x":1}`, params{N: 7}, false},
		{`{"method":"m\u0020"}`, params{N: 7}, true}, // another method's body, read in full
	} {
		q := &Request{Method: "m", Body: []byte(c.body)}
		got := params{N: 7}
		err := q.Decode(&got)
		if (err == nil) != c.ok || err == nil && got != c.want {
			t.Errorf("%s: got %+v, %v; want %+v (ok %v)", c.body, got, err, c.want, c.ok)
		}
	}
	var m map[string]any
	if err := (&Request{Method: "m", Body: []byte(`{"method":"m"}`)}).Decode(&m); err != nil || m == nil || len(m) != 0 {
		t.Errorf("into a map: %v, %v; want an empty map", m, err)
	}
}

// strictParams refuses every parameter object, {} among them.
type strictParams struct{}

func (*strictParams) UnmarshalJSON([]byte) error { return errors.New("refused") }

// textParams reads itself from a JSON string, so an object is wrong for it.
type textParams struct{ s string }

func (p *textParams) UnmarshalText(b []byte) error { p.s = string(b); return nil }

func TestDecodeLetsAParameterTypeJudgeEvenNoParameters(t *testing.T) {
	for _, body := range []string{`{"method":"m"}`, `{"method": "m"}`} { // read plainly, and in full
		var p strictParams
		if err := (&Request{Method: "m", Body: []byte(body)}).Decode(&p); err == nil {
			t.Errorf("%s: a parameter type with its own JSON reading was not asked", body)
		}
		var q textParams
		if err := (&Request{Method: "m", Body: []byte(body)}).Decode(&q); err == nil {
			t.Errorf("%s: a parameter type read from text took an object", body)
		}
	}
}
