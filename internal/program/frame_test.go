package program

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/lossless"
)

func TestParseChildFrame(t *testing.T) {
	negZero := math.Copysign(0, -1)
	tests := []struct {
		line string
		want Frame // nil: junk
	}{
		{`{"type":"boot-ack"}`, BootAck{}},
		{`{"type":"boot-ack","extra":[1,2]}`, BootAck{}},
		{`{"type":"log","text":"hi"}`, Log{Text: "hi"}},
		{`{"type":"log","text":"hi","open":true}`, Log{Text: "hi", Open: true}},
		{`{"type":"log","text":"","truncated":true}`, Log{Truncated: true}},
		{`{"type":"log","text":"x","truncated":"yes","open":1}`, Log{Text: "x"}},
		{`{"type":"log","text":"x","truncated":false,"open":null}`, Log{Text: "x"}},
		{`{"type":"log","text":"\ud800"}`, Log{Text: "\xed\xa0\x80"}},
		{`{"type":"log"}`, nil},
		{`{"type":"log","text":null}`, nil},
		{`{"type":"call","id":0,"global":"g","name":"n","args":null}`, Call{ID: 0, Global: "g", Name: "n"}},
		{`{"type":"call","id":3,"global":"g","name":"n","args":{"q":[1,"x"]}}`, Call{ID: 3, Global: "g", Name: "n", Args: lossless.NewObject(lossless.Member{Key: "q", Value: lossless.Array{lossless.Number(1), lossless.String("x")}})}},
		{`{"type":"call","id":1.5,"global":"g","name":"n","args":1}`, Call{ID: 1.5, Global: "g", Name: "n", Args: lossless.Number(1)}},
		{`{"type":"call","id":-0,"global":"g","name":"n","args":null}`, nil},
		{`{"type":"call","id":1e400,"global":"g","name":"n","args":null}`, nil},
		{`{"type":"call","id":"0","global":"g","name":"n","args":null}`, nil},
		{`{"type":"call","global":"g","name":"n","args":null}`, nil},
		{`{"type":"call","id":0,"name":"n","args":null}`, nil},
		{`{"type":"call","id":0,"global":"g","name":7,"args":null}`, nil},
		{`{"type":"call","id":0,"global":"g","name":"n"}`, nil},
		{`{"type":"call","id":0,"global":"g","name":"n","args":[1,[-0]]}`, nil},
		{`{"type":"call","id":0,"global":"g","name":"n","args":{"a":1e999}}`, nil},
		{`{"type":"call","id":0,"global":"g","name":"n","args":9007199254740993}`, nil},
		{`{"type":"call","id":0,"global":"g","name":"n","args":"9007199254740993"}`, Call{Global: "g", Name: "n", Args: lossless.String("9007199254740993")}},
		{`{"type":"done"}`, Done{}},
		{`{"type":"done","value":null}`, Done{HasValue: true}},
		{`{"type":"done","value":[1e400]}`, Done{Value: lossless.Array{lossless.Number(math.Inf(1))}, HasValue: true}},
		{`{"type":"done","value":-0}`, Done{Value: lossless.Number(negZero), HasValue: true}},
		{`{"type":"done","value":1,"error":{"kind":"exception","message":"m"}}`, Done{Error: &DoneError{Kind: StatusException, Message: "m"}}},
		{`{"type":"done","error":{"kind":"invalid-output","message":"m","extra":1}}`, Done{Error: &DoneError{Kind: StatusInvalidOutput, Message: "m"}}},
		{`{"type":"done","error":{"kind":"output-limit","message":""}}`, Done{Error: &DoneError{Kind: StatusOutputLimit}}},
		{`{"type":"done","error":null}`, nil},
		{`{"type":"done","error":"boom"}`, nil},
		{`{"type":"done","error":{"kind":"exception","message":5}}`, nil},
		{`{"type":"done","error":{"kind":"exception"}}`, nil},
		{`{"type":"done","error":{"kind":"timeout","message":"m"}}`, nil},
		{`{"type":"done","error":{"kind":"ok","message":"m"}}`, nil},
		{`{"type":"done","value":9007199254740993}`, nil},
		{`{"type":"reply","id":0,"ok":true,"value":1}`, nil}, // a host frame
		{`{"type":"boot"}`, nil},
		{`{"type":"BOOT-ACK"}`, nil},
		{`{"type":1}`, nil},
		{`{}`, nil},
		{`[]`, nil},
		{`"boot-ack"`, nil},
		{`null`, nil},
		{`{"type":"boot-ack"} {}`, nil},
		{`{"type":"boot-ack",}`, nil},
		{"{\"type\":\"log\",\"text\":\"\xff\"}", nil},
		{"{\"type\":\"boot-ack\"}\xff", nil},
		{`{"type":"log","text":"a","type":"boot-ack"}`, BootAck{}}, // JSON.parse: the last wins
	}
	for _, tt := range tests {
		got, err := ParseChildFrame([]byte(tt.line))
		if tt.want == nil {
			if err == nil || !errors.Is(err, ErrJunk) {
				t.Errorf("ParseChildFrame(%s) = %#v, %v; want ErrJunk", tt.line, got, err)
			}
			if err != nil && strings.Contains(err.Error(), tt.line) {
				t.Errorf("ParseChildFrame(%s): the error %q echoes the frame", tt.line, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseChildFrame(%s) = %v; want %#v", tt.line, err, tt.want)
			continue
		}
		if !sameFrame(got, tt.want) {
			t.Errorf("ParseChildFrame(%s) = %#v; want %#v", tt.line, got, tt.want)
		}
	}
}

// sameFrame compares frames, values by their encoding (and −0 by its sign).
func sameFrame(a, b Frame) bool {
	enc := func(f Frame) string {
		switch f := f.(type) {
		case Call:
			return fmt.Sprintf("call %v %q %q %s %v", f.ID, f.Global, f.Name, lossless.Encode(f.Args), lossless.Lossy(f.Args))
		case Done:
			return fmt.Sprintf("done %s %v %v %+v", lossless.Encode(f.Value), lossless.Lossy(f.Value), f.HasValue, f.Error)
		}
		return fmt.Sprintf("%#v", f)
	}
	return enc(a) == enc(b)
}

func TestAppendHostFrames(t *testing.T) {
	boot := AppendBoot(nil, Boot{
		CPUSeconds: 60, AddressSpaceBytes: 512 << 20, MaxLogBytes: 65536, MaxValueBytes: 32768,
		Namespaces: []NamespaceDecl{
			{Global: "tools", Names: []string{"search"}, ErrorClass: &ErrorClass{Name: "ToolError", MemberNameProperty: "member"}},
			{Global: "db", Names: []string{}},
		},
	})
	tests := []struct{ got, want string }{
		{string(boot), `{"type":"boot","cpuSeconds":60,"addressSpaceBytes":536870912,"maxLogBytes":65536,"maxValueBytes":32768,"namespaces":[{"global":"tools","names":["search"],"errorClass":{"name":"ToolError","memberNameProperty":"member"}},{"global":"db","names":[]}]}` + "\n"},
		{string(AppendRun(nil, "return \"é\"\n")), `{"type":"run","program":"return \"é\"\n"}` + "\n"},
		{string(AppendReply(nil, Reply{ID: 3, OK: true, Value: lossless.Array{lossless.Number(1 << 60), lossless.String("\xed\xa0\x80")}})), `{"type":"reply","id":3,"ok":true,"value":[1152921504606846976,"\ud800"]}` + "\n"},
		{string(AppendReply(nil, Reply{ID: 4, OK: true})), `{"type":"reply","id":4,"ok":true,"value":null}` + "\n"},
		{string(AppendReply(nil, Reply{ID: 5, Message: "no\n"})), `{"type":"reply","id":5,"ok":false,"message":"no\n"}` + "\n"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got  %s\nwant %s", tt.got, tt.want)
		}
	}
}

// TestHostFramesMatchTheirFields checks that each host frame writes exactly the
// fields its type declares: the required ones always, and no other.
func TestHostFramesMatchTheirFields(t *testing.T) {
	sets := FieldSets()
	keys := func(line []byte) []string {
		v, err := lossless.Decode(line[:len(line)-1])
		if err != nil {
			t.Fatal(err)
		}
		var ks []string
		for k := range v.(lossless.Object).All() {
			ks = append(ks, k)
		}
		return ks
	}
	check := func(name string, ks []string) {
		f := sets[name]
		for _, r := range f.Required {
			if !slices.Contains(ks, r) {
				t.Errorf("%s: required field %q missing from %q", name, r, ks)
			}
		}
		for _, k := range ks {
			if !slices.Contains(f.Required, k) && !slices.Contains(f.Optional, k) {
				t.Errorf("%s: field %q is not declared", name, k)
			}
		}
	}
	boot := AppendBoot(nil, Boot{Namespaces: []NamespaceDecl{{Global: "g", Names: []string{"n"}, ErrorClass: &ErrorClass{"E", "m"}}}})
	check("boot", keys(boot))
	v, _ := lossless.Decode(boot[:len(boot)-1])
	ns, _ := v.(lossless.Object).Get("namespaces")
	var nsKeys, ecKeys []string
	for k, v := range ns.(lossless.Array)[0].(lossless.Object).All() {
		nsKeys = append(nsKeys, k)
		if k == "errorClass" {
			for k := range v.(lossless.Object).All() {
				ecKeys = append(ecKeys, k)
			}
		}
	}
	check("namespace", nsKeys)
	check("errorClass", ecKeys)
	check("run", keys(AppendRun(nil, "")))
	check("reply", keys(AppendReply(nil, Reply{OK: true})))
	check("reply", keys(AppendReply(nil, Reply{Message: "m"})))
}

// TestChildFramesKeepTheirFields builds each child frame with every field its type
// declares, and one more: ParseChildFrame keeps the declared ones only.
func TestChildFramesKeepTheirFields(t *testing.T) {
	lines := map[string]string{
		"boot-ack": `{"type":"boot-ack","x":1}`,
		"call":     `{"type":"call","id":0,"global":"g","name":"n","args":1,"x":1}`,
		"log":      `{"type":"log","text":"t","truncated":true,"open":true,"x":1}`,
		"done":     `{"type":"done","value":1,"x":1}`,
	}
	for name, line := range lines {
		f, err := ParseChildFrame([]byte(line))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := append(slices.Clone(FieldSets()[name].Required), FieldSets()[name].Optional...)
		var got []string
		rv := reflect.ValueOf(f)
		for i := range rv.NumField() {
			tag, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("json"), ",")
			if tag != "-" {
				got = append(got, tag)
			}
		}
		got = append(got, "type")
		slices.Sort(got)
		slices.Sort(want)
		if name == "done" {
			want = slices.DeleteFunc(want, func(s string) bool { return s == "error" }) // error wins over value: one at a time
			got = slices.DeleteFunc(got, func(s string) bool { return s == "error" })
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: the frame type holds %q; FieldSets says %q", name, got, want)
		}
	}
}

func TestFieldSets(t *testing.T) {
	want := map[string]Fields{
		"boot":       {Required: []string{"addressSpaceBytes", "cpuSeconds", "maxLogBytes", "maxValueBytes", "namespaces", "type"}, Optional: []string{}},
		"namespace":  {Required: []string{"global", "names"}, Optional: []string{"errorClass"}},
		"errorClass": {Required: []string{"memberNameProperty", "name"}, Optional: []string{}},
		"run":        {Required: []string{"program", "type"}, Optional: []string{}},
		"reply":      {Required: []string{"id", "ok", "type"}, Optional: []string{"message", "value"}},
		"boot-ack":   {Required: []string{"type"}, Optional: []string{}},
		"call":       {Required: []string{"args", "global", "id", "name", "type"}, Optional: []string{}},
		"log":        {Required: []string{"text", "type"}, Optional: []string{"open", "truncated"}},
		"done":       {Required: []string{"type"}, Optional: []string{"error", "value"}},
		"done.error": {Required: []string{"kind", "message"}, Optional: []string{}},
	}
	if got := FieldSets(); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v; want %v", got, want)
	}
}

func TestCapMessage(t *testing.T) {
	tests := []struct {
		msg   string
		limit int
		want  string
	}{
		{"short", 5, "short"},
		{"longer", 5, "… ["}, // no room for the message: the suffix alone, cut
		{strings.Repeat("a", 20), 20, strings.Repeat("a", 20)},
		{strings.Repeat("a", 21), 20, "aaaaa" + truncatedSuffix},
		{strings.Repeat("é", 20), 20, "éé" + truncatedSuffix}, // a third é would be split
		{strings.Repeat("a", 100), 15, truncatedSuffix},
		{strings.Repeat("a", 100), 16, "a" + truncatedSuffix},
		{strings.Repeat("a", 100), 4, "… "},
		{strings.Repeat("a", 100), 2, ""},
		{strings.Repeat("a", 100), 0, ""},
	}
	for _, tt := range tests {
		got := capMessage(tt.msg, tt.limit)
		if got != tt.want {
			t.Errorf("capMessage(%.10q…, %d) = %q; want %q", tt.msg, tt.limit, got, tt.want)
		}
		if len(got) > tt.limit {
			t.Errorf("capMessage(%.10q…, %d) is %d bytes", tt.msg, tt.limit, len(got))
		}
	}
}

func TestPreview(t *testing.T) {
	long := strings.Repeat("x", 2000)
	tests := []struct {
		global, name string
		limit        int
		want         string
	}{
		{"tools", "nope", 100, `"tools.nope"`},
		{"tools", "a\"b\n", 100, `"tools.a\"b\n"`},
		{"tools", "\xed\xa0\x80", 100, "\"tools.\ufffd\""},
		{"tools", long, 5, `"tools.xxxxx"`}, // each cut to the value budget
		{"tools", long, 10000, `"tools.` + strings.Repeat("x", previewBytes-len("tools.")) + `…"`},
	}
	for _, tt := range tests {
		if got := preview(tt.global, tt.name, tt.limit); got != tt.want {
			t.Errorf("preview(%q, %.10q, %d) = %.80q; want %.80q", tt.global, tt.name, tt.limit, got, tt.want)
		}
	}
}
