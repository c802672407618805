package jsonbuf

import (
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

func TestBuildsCompactJSON(t *testing.T) {
	b := New([]byte("x"))
	b.Raw(`{"a":`)
	b.String("q\"<é>\n")
	b.Raw(`,"n":`)
	b.Int(-12)
	b.Raw(`,"v":`)
	b.Value(jsontext.Value(`{ "k" : [1, 2] }`))
	b.Raw("}")
	got, err := b.Bytes()
	if want := `x{"a":"q\"<é>\n","n":-12,"v":{"k":[1,2]}}`; err != nil || string(got) != want {
		t.Errorf("got %s, %v; want %s", got, err, want)
	}
}

func TestKeepsTheFirstError(t *testing.T) {
	b := New(nil)
	b.String("ok")
	b.String("bad \xff")
	b.Value(jsontext.Value(`{"unclosed":`))
	if _, err := b.Bytes(); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("got %v; want the invalid UTF-8 of the first string", err)
	}
	b = New(nil)
	b.Value(jsontext.Value(""))
	if _, err := b.Bytes(); err == nil {
		t.Error("an empty value was taken for JSON")
	}
}
