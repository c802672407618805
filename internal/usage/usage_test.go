package usage

import (
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// n is a reported count; d a derived one.
func n(v int64) *Count { return &Count{Value: v} }
func d(v int64) *Count { return &Count{Value: v, Derived: true} }

// samples are the recorded usage objects under testdata, each with what Parse must read
// from it and what WithDerived must then add.
var samples = map[string]struct{ parsed, derived Usage }{
	"openai-chat-cached.json": {
		Usage{Shape: ShapeOpenAIChat, PromptTokens: n(2006), CompletionTokens: n(300), TotalTokens: n(2306), CachedPromptTokens: n(1920)},
		Usage{Shape: ShapeOpenAIChat, PromptTokens: n(2006), CompletionTokens: n(300), TotalTokens: n(2306), CachedPromptTokens: n(1920), UncachedPromptTokens: d(86)},
	},
	"openai-chat-cached-zero.json": {
		Usage{Shape: ShapeOpenAIChat, PromptTokens: n(19), CompletionTokens: n(10), TotalTokens: n(29), CachedPromptTokens: n(0)},
		Usage{Shape: ShapeOpenAIChat, PromptTokens: n(19), CompletionTokens: n(10), TotalTokens: n(29), CachedPromptTokens: n(0), UncachedPromptTokens: d(19)},
	},
	"openai-chat-no-details.json": {
		Usage{Shape: ShapeOpenAIChat, PromptTokens: n(25), CompletionTokens: n(120), TotalTokens: n(145)},
		Usage{Shape: ShapeOpenAIChat, PromptTokens: n(25), CompletionTokens: n(120), TotalTokens: n(145)},
	},
	"openai-chat-openrouter.json": {
		Usage{Shape: ShapeOpenAIChat, PromptTokens: n(10342), CompletionTokens: n(512), TotalTokens: n(10854), CachedPromptTokens: n(0), CacheWriteTokens: n(10318)},
		Usage{Shape: ShapeOpenAIChat, PromptTokens: n(10342), CompletionTokens: n(512), TotalTokens: n(10854), CachedPromptTokens: n(0), CacheWriteTokens: n(10318), UncachedPromptTokens: d(10342)},
	},
	"openai-chat-cache-write-top.json": {
		Usage{Shape: ShapeOpenAIChat, PromptTokens: n(4810), CompletionTokens: n(96), TotalTokens: n(4906), CachedPromptTokens: n(4608), CacheWriteTokens: n(0)},
		Usage{Shape: ShapeOpenAIChat, PromptTokens: n(4810), CompletionTokens: n(96), TotalTokens: n(4906), CachedPromptTokens: n(4608), CacheWriteTokens: n(0), UncachedPromptTokens: d(202)},
	},
	"openai-responses-cached.json": {
		Usage{Shape: ShapeOpenAIResponses, PromptTokens: n(1532), CompletionTokens: n(412), TotalTokens: n(1944), CachedPromptTokens: n(1280)},
		Usage{Shape: ShapeOpenAIResponses, PromptTokens: n(1532), CompletionTokens: n(412), TotalTokens: n(1944), CachedPromptTokens: n(1280), UncachedPromptTokens: d(252)},
	},
	"openai-responses-cached-zero.json": {
		Usage{Shape: ShapeOpenAIResponses, PromptTokens: n(36), CompletionTokens: n(87), TotalTokens: n(123), CachedPromptTokens: n(0)},
		Usage{Shape: ShapeOpenAIResponses, PromptTokens: n(36), CompletionTokens: n(87), TotalTokens: n(123), CachedPromptTokens: n(0), UncachedPromptTokens: d(36)},
	},
	"openai-responses-cache-write.json": {
		Usage{Shape: ShapeOpenAIResponses, PromptTokens: n(8804), CompletionTokens: n(141), TotalTokens: n(8945), CachedPromptTokens: n(0), CacheWriteTokens: n(8790)},
		Usage{Shape: ShapeOpenAIResponses, PromptTokens: n(8804), CompletionTokens: n(141), TotalTokens: n(8945), CachedPromptTokens: n(0), CacheWriteTokens: n(8790), UncachedPromptTokens: d(8804)},
	},
	"openai-responses-no-details.json": {
		Usage{Shape: ShapeOpenAIResponses, PromptTokens: n(12), CompletionTokens: n(40), TotalTokens: n(52)},
		Usage{Shape: ShapeOpenAIResponses, PromptTokens: n(12), CompletionTokens: n(40), TotalTokens: n(52)},
	},
	"deepseek-hit.json": {
		Usage{Shape: ShapeDeepSeek, PromptTokens: n(1050), CompletionTokens: n(210), TotalTokens: n(1260), CachedPromptTokens: n(1024), UncachedPromptTokens: n(26)},
		Usage{Shape: ShapeDeepSeek, PromptTokens: n(1050), CompletionTokens: n(210), TotalTokens: n(1260), CachedPromptTokens: n(1024), UncachedPromptTokens: n(26)},
	},
	"deepseek-miss.json": {
		Usage{Shape: ShapeDeepSeek, PromptTokens: n(16), CompletionTokens: n(10), TotalTokens: n(26), CachedPromptTokens: n(0), UncachedPromptTokens: n(16)},
		Usage{Shape: ShapeDeepSeek, PromptTokens: n(16), CompletionTokens: n(10), TotalTokens: n(26), CachedPromptTokens: n(0), UncachedPromptTokens: n(16)},
	},
	"deepseek-reasoner.json": {
		Usage{Shape: ShapeDeepSeek, PromptTokens: n(13), CompletionTokens: n(451), TotalTokens: n(464), CachedPromptTokens: n(0), UncachedPromptTokens: n(13)},
		Usage{Shape: ShapeDeepSeek, PromptTokens: n(13), CompletionTokens: n(451), TotalTokens: n(464), CachedPromptTokens: n(0), UncachedPromptTokens: n(13)},
	},
	"anthropic-cache-write.json": {
		Usage{Shape: ShapeAnthropic, UncachedUnwrittenPromptTokens: n(21), CompletionTokens: n(393), CachedPromptTokens: n(0), CacheWriteTokens: n(188086)},
		Usage{Shape: ShapeAnthropic, UncachedUnwrittenPromptTokens: n(21), CompletionTokens: n(393), CachedPromptTokens: n(0), CacheWriteTokens: n(188086),
			PromptTokens: d(188107), UncachedPromptTokens: d(188107), TotalTokens: d(188500)},
	},
	"anthropic-cache-read.json": {
		Usage{Shape: ShapeAnthropic, UncachedUnwrittenPromptTokens: n(21), CompletionTokens: n(393), CachedPromptTokens: n(188086), CacheWriteTokens: n(0)},
		Usage{Shape: ShapeAnthropic, UncachedUnwrittenPromptTokens: n(21), CompletionTokens: n(393), CachedPromptTokens: n(188086), CacheWriteTokens: n(0),
			PromptTokens: d(188107), UncachedPromptTokens: d(21), TotalTokens: d(188500)},
	},
	"anthropic-no-cache.json": {
		Usage{Shape: ShapeAnthropic, UncachedUnwrittenPromptTokens: n(2095), CompletionTokens: n(503), CachedPromptTokens: n(0), CacheWriteTokens: n(0)},
		Usage{Shape: ShapeAnthropic, UncachedUnwrittenPromptTokens: n(2095), CompletionTokens: n(503), CachedPromptTokens: n(0), CacheWriteTokens: n(0),
			PromptTokens: d(2095), UncachedPromptTokens: d(2095), TotalTokens: d(2598)},
	},
	"anthropic-cache-null.json": {
		Usage{Shape: ShapeAnthropic, UncachedUnwrittenPromptTokens: n(472), CompletionTokens: n(1)},
		Usage{Shape: ShapeAnthropic, UncachedUnwrittenPromptTokens: n(472), CompletionTokens: n(1)},
	},
}

// sampleFiles returns the recorded samples under testdata.
func sampleFiles(t testing.TB) []string {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples in testdata: %v", err)
	}
	return files
}

func TestParseSamples(t *testing.T) {
	files := sampleFiles(t)
	if len(files) != len(samples) {
		t.Errorf("%d sample files, %d expectations", len(files), len(samples))
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			want, ok := samples[filepath.Base(file)]
			if !ok {
				t.Fatal("no expectation for this sample")
			}
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want.parsed) {
				t.Errorf("Parse:\n got %s\nwant %s", show(t, got), show(t, want.parsed))
			}
			if derived := got.WithDerived(); !reflect.DeepEqual(derived, want.derived) {
				t.Errorf("WithDerived:\n got %s\nwant %s", show(t, derived), show(t, want.derived))
			}
		})
	}
}

// show is u as JSON, for failure messages.
func show(t *testing.T, u Usage) string {
	b, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAbsentIsNotZero checks that an absent or null measurement stays nil, a reported
// zero stays a zero, and both survive a JSON round trip.
func TestAbsentIsNotZero(t *testing.T) {
	for _, c := range []struct {
		in         string
		wantCached *Count
		wantJSON   string
	}{
		{`{"prompt_tokens":7}`, nil,
			`{"shape":"openai-chat","prompt_tokens":{"value":7}}`},
		{`{"prompt_tokens":7,"prompt_tokens_details":{"cached_tokens":null}}`, nil,
			`{"shape":"openai-chat","prompt_tokens":{"value":7}}`},
		{`{"prompt_tokens":7,"prompt_tokens_details":{}}`, nil,
			`{"shape":"openai-chat","prompt_tokens":{"value":7}}`},
		{`{"prompt_tokens":7,"prompt_tokens_details":{"cached_tokens":0}}`, n(0),
			`{"shape":"openai-chat","prompt_tokens":{"value":7},"cached_prompt_tokens":{"value":0}}`},
	} {
		u, err := Parse([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if !reflect.DeepEqual(u.CachedPromptTokens, c.wantCached) {
			t.Errorf("%s: cached %v, want %v", c.in, u.CachedPromptTokens, c.wantCached)
		}
		b, err := json.Marshal(u)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.wantJSON {
			t.Errorf("%s: marshals to %s, want %s", c.in, b, c.wantJSON)
		}
		var back Usage
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, u) {
			t.Errorf("%s: round trip gives %+v, %v", c.in, back, err)
		}
	}
}

func TestParseAccepts(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Usage
	}{
		// null is not a report; the member still places the object in its shape.
		{`{"input_tokens":5,"cache_read_input_tokens":null}`,
			Usage{Shape: ShapeAnthropic, UncachedUnwrittenPromptTokens: n(5)}},
		{`{"prompt_tokens":null}`, Usage{Shape: ShapeOpenAIChat}},
		{`{"prompt_cache_miss_tokens":3}`, Usage{Shape: ShapeDeepSeek, UncachedPromptTokens: n(3)}},
		{`{"output_tokens":15}`, Usage{Shape: ShapeOpenAIResponses, CompletionTokens: n(15)}},
		// Two members naming one count may both appear when they agree.
		{`{"prompt_cache_hit_tokens":4,"prompt_tokens_details":{"cached_tokens":4}}`,
			Usage{Shape: ShapeDeepSeek, CachedPromptTokens: n(4)}},
		{`{"prompt_tokens":9,"cache_write_tokens":2,"prompt_tokens_details":{"cache_write_tokens":2}}`,
			Usage{Shape: ShapeOpenAIChat, PromptTokens: n(9), CacheWriteTokens: n(2)}},
		{`{"input_tokens":9,"cache_write_tokens":2}`,
			Usage{Shape: ShapeOpenAIResponses, PromptTokens: n(9), CacheWriteTokens: n(2)}},
		// Members the shape does not read are ignored, whatever they hold.
		{`{"input_tokens":1,"cache_creation_input_tokens":0,"total_tokens":"x","cost":1.5,"extra":{"a":[1,{}]}}`,
			Usage{Shape: ShapeAnthropic, UncachedUnwrittenPromptTokens: n(1), CacheWriteTokens: n(0)}},
		// Escaped names, surrounding space and the largest int64.
		{" \n{\"prompt\\u005ftokens\" : 9223372036854775807 }\n",
			Usage{Shape: ShapeOpenAIChat, PromptTokens: n(math.MaxInt64)}},
	} {
		got, err := Parse([]byte(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %s\nwant %s", c.in, show(t, got), show(t, c.want))
		}
	}
}

func TestParseRefuses(t *testing.T) {
	long := `"` + strings.Repeat("é", 30) + `"`
	for _, c := range []struct{ in, want string }{
		{`{"prompt_tokens":"12"}`, `usage: prompt_tokens: want a non-negative integer, got "12"`},
		{`{"prompt_tokens":1.5}`, `usage: prompt_tokens: want a non-negative integer, got 1.5`},
		{`{"prompt_tokens":1.0}`, `usage: prompt_tokens: want a non-negative integer, got 1.0`},
		{`{"prompt_tokens":1e3}`, `usage: prompt_tokens: want a non-negative integer, got 1e3`},
		{`{"prompt_tokens":-3}`, `usage: prompt_tokens: want a non-negative integer, got -3`},
		{`{"prompt_tokens":-0}`, `usage: prompt_tokens: want a non-negative integer, got -0`},
		{`{"prompt_tokens":9223372036854775808}`, `usage: prompt_tokens: want a non-negative integer, got 9223372036854775808`},
		{`{"prompt_tokens":true}`, `usage: prompt_tokens: want a non-negative integer, got true`},
		{`{"prompt_tokens":[1]}`, `usage: prompt_tokens: want a non-negative integer, got [1]`},
		{`{"prompt_tokens":` + long + `}`, `usage: prompt_tokens: want a non-negative integer, got "ééééééééééééééééééé...`},
		{`{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":-1}}`,
			`usage: prompt_tokens_details.cached_tokens: want a non-negative integer, got -1`},
		{`{"input_tokens":1,"input_tokens_details":{"cache_write_tokens":"0"}}`,
			`usage: input_tokens_details.cache_write_tokens: want a non-negative integer, got "0"`},
		{`{"input_tokens":1,"cache_read_input_tokens":0.5}`,
			`usage: cache_read_input_tokens: want a non-negative integer, got 0.5`},
		{`{"prompt_cache_hit_tokens":1,"prompt_cache_miss_tokens":-2}`,
			`usage: prompt_cache_miss_tokens: want a non-negative integer, got -2`},
		{`{"prompt_tokens":1,"prompt_tokens_details":5}`, `usage: prompt_tokens_details: want an object, got 5`},
		{`{"input_tokens":1,"input_tokens_details":[]}`, `usage: input_tokens_details: want an object, got []`},
		// Duplicate members, at any depth.
		{`{"prompt_tokens":1,"prompt_tokens":1}`, `usage: prompt_tokens: duplicate member`},
		{`{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":0,"cached_tokens":0}}`,
			`usage: prompt_tokens_details.cached_tokens: duplicate member`},
		{`{"input_tokens":1,"x":[{"a":1,"a":2}]}`, `usage: x.0.a: duplicate member`},
		// Reports of one count that disagree.
		{`{"prompt_cache_hit_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}`,
			`usage: prompt_cache_hit_tokens is 5 but prompt_tokens_details.cached_tokens is 4`},
		{`{"prompt_tokens":9,"prompt_tokens_details":{"cache_write_tokens":2},"cache_write_tokens":3}`,
			`usage: prompt_tokens_details.cache_write_tokens is 2 but cache_write_tokens is 3`},
		// No shape, or two.
		{`{}`, `usage: no recognised shape: none of prompt_tokens, completion_tokens, prompt_tokens_details, prompt_cache_hit_tokens, prompt_cache_miss_tokens, input_tokens, output_tokens, input_tokens_details, cache_read_input_tokens, cache_creation_input_tokens is present`},
		{`{"total_tokens":5,"cache_write_tokens":1}`, `usage: no recognised shape: none of `},
		{`{"prompt_tokens":1,"input_tokens":1}`, `usage: ambiguous shape: prompt_tokens is a chat member, input_tokens an input member`},
		{`{"prompt_cache_hit_tokens":1,"cache_read_input_tokens":1}`, `usage: ambiguous shape: prompt_cache_hit_tokens is a chat member, cache_read_input_tokens an input member`},
		// Not one valid object.
		{`null`, `usage: want an object, got null`},
		{` [] `, `usage: want an object, got []`},
		{``, `usage: want an object, got nothing`},
		{`{"prompt_tokens":1`, `usage: jsontext: unexpected EOF`},
		{`{"prompt_tokens":1} {}`, `usage: jsontext: invalid character '{' after top-level value`},
		{"{\"prompt_tokens\":1,\"x\":\"\xff\"}", `usage: jsontext: invalid UTF-8`},
	} {
		u, err := Parse([]byte(c.in))
		if err == nil {
			t.Errorf("%s: accepted as %+v; want %q", c.in, u, c.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.in, err, c.want)
		}
		if !reflect.DeepEqual(u, Usage{}) {
			t.Errorf("%s: refused but returned %+v", c.in, u)
		}
	}
}

func TestWithDerived(t *testing.T) {
	for _, c := range []struct {
		name    string
		in, out Usage
	}{
		{"reported counts are kept even when inconsistent",
			Usage{PromptTokens: n(10), CompletionTokens: n(5), TotalTokens: n(99), CachedPromptTokens: n(4), UncachedPromptTokens: n(1)},
			Usage{PromptTokens: n(10), CompletionTokens: n(5), TotalTokens: n(99), CachedPromptTokens: n(4), UncachedPromptTokens: n(1)}},
		{"a reported prompt total is not recomputed",
			Usage{PromptTokens: n(100), UncachedUnwrittenPromptTokens: n(1), CachedPromptTokens: n(2), CacheWriteTokens: n(3)},
			Usage{PromptTokens: n(100), UncachedUnwrittenPromptTokens: n(1), CachedPromptTokens: n(2), CacheWriteTokens: n(3), UncachedPromptTokens: d(98)}},
		{"no prompt total without every part",
			Usage{UncachedUnwrittenPromptTokens: n(1), CachedPromptTokens: n(2), CompletionTokens: n(3)},
			Usage{UncachedUnwrittenPromptTokens: n(1), CachedPromptTokens: n(2), CompletionTokens: n(3)}},
		{"no uncached count without a cached one",
			Usage{PromptTokens: n(10), CompletionTokens: n(5)},
			Usage{PromptTokens: n(10), CompletionTokens: n(5), TotalTokens: d(15)}},
		{"no negative uncached count",
			Usage{PromptTokens: n(3), CachedPromptTokens: n(4)},
			Usage{PromptTokens: n(3), CachedPromptTokens: n(4)}},
		{"no overflowing total",
			Usage{PromptTokens: n(math.MaxInt64), CompletionTokens: n(1)},
			Usage{PromptTokens: n(math.MaxInt64), CompletionTokens: n(1)}},
		{"no overflowing prompt total",
			Usage{UncachedUnwrittenPromptTokens: n(math.MaxInt64), CachedPromptTokens: n(0), CacheWriteTokens: n(1)},
			Usage{UncachedUnwrittenPromptTokens: n(math.MaxInt64), CachedPromptTokens: n(0), CacheWriteTokens: n(1)}},
		{"the largest total that fits",
			Usage{PromptTokens: n(math.MaxInt64 - 1), CompletionTokens: n(1)},
			Usage{PromptTokens: n(math.MaxInt64 - 1), CompletionTokens: n(1), TotalTokens: d(math.MaxInt64)}},
		{"nothing to derive from", Usage{}, Usage{}},
	} {
		before := show(t, c.in)
		if got := c.in.WithDerived(); !reflect.DeepEqual(got, c.out) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, show(t, got), show(t, c.out))
		}
		if after := show(t, c.in); after != before {
			t.Errorf("%s: WithDerived changed its receiver from %s to %s", c.name, before, after)
		}
	}
}

func TestStrip(t *testing.T) {
	options := map[string]jsontext.Value{
		"model":                  jsontext.Value(`"m"`),
		"temperature":            jsontext.Value(`0.2`),
		"prompt_cache_key":       jsontext.Value(`"session-1"`),
		"prompt_cache_retention": jsontext.Value(`"24h"`),
		"prompt_cache_options":   jsontext.Value(`{"mode":"auto"}`),
	}
	original := maps.Clone(options)
	for _, c := range []struct {
		profile Profile
		want    []string
	}{
		{Profile{Name: "plain"},
			[]string{"model", "temperature", "prompt_cache_key"}},
		{Profile{Name: "key only", CacheFields: []string{"prompt_cache_key"}},
			[]string{"model", "temperature", "prompt_cache_key"}},
		{Profile{Name: "retention", CacheFields: []string{"prompt_cache_key", "prompt_cache_retention"}},
			[]string{"model", "temperature", "prompt_cache_key", "prompt_cache_retention"}},
		{Profile{Name: "all", CacheFields: []string{"prompt_cache_key", "prompt_cache_retention", "prompt_cache_options"}},
			[]string{"model", "temperature", "prompt_cache_key", "prompt_cache_retention", "prompt_cache_options"}},
	} {
		got := c.profile.Strip(options)
		want := make(map[string]jsontext.Value)
		for _, k := range c.want {
			want[k] = options[k]
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: kept %q, want %q", c.profile.Name, slices.Sorted(maps.Keys(got)), c.want)
		}
		if !reflect.DeepEqual(options, original) {
			t.Fatalf("%s: Strip modified its argument", c.profile.Name)
		}
	}
	if got := (Profile{}).Strip(nil); got != nil {
		t.Errorf("Strip(nil) = %v, want nil", got)
	}
	got := (Profile{}).Strip(map[string]jsontext.Value{"prompt_cache_options": jsontext.Value(`{}`)})
	if got == nil || len(got) != 0 {
		t.Errorf("stripping every option gives %v, want an empty map", got)
	}
}

// counts lists u's counts by name.
func counts(u Usage) map[string]*Count {
	return map[string]*Count{
		"prompt_tokens":                    u.PromptTokens,
		"completion_tokens":                u.CompletionTokens,
		"total_tokens":                     u.TotalTokens,
		"cached_prompt_tokens":             u.CachedPromptTokens,
		"cache_write_tokens":               u.CacheWriteTokens,
		"uncached_prompt_tokens":           u.UncachedPromptTokens,
		"uncached_unwritten_prompt_tokens": u.UncachedUnwrittenPromptTokens,
	}
}

func FuzzParse(f *testing.F) {
	for _, file := range sampleFiles(f) {
		raw, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		u, err := Parse(raw)
		if err != nil {
			if !reflect.DeepEqual(u, Usage{}) {
				t.Fatalf("refused (%v) but returned %+v", err, u)
			}
			return
		}
		switch u.Shape {
		case ShapeOpenAIChat, ShapeOpenAIResponses, ShapeDeepSeek, ShapeAnthropic:
		default:
			t.Fatalf("unknown shape %q", u.Shape)
		}
		parsed := counts(u)
		for name, c := range parsed {
			if c != nil && (c.Value < 0 || c.Derived) {
				t.Fatalf("Parse gave %s %+v", name, *c)
			}
		}
		for name, c := range counts(u.WithDerived()) {
			switch reported := parsed[name]; {
			case reported != nil && c != reported:
				t.Fatalf("WithDerived replaced reported %s %+v with %+v", name, *reported, c)
			case reported == nil && c != nil && (c.Value < 0 || !c.Derived):
				t.Fatalf("WithDerived gave %s %+v", name, *c)
			}
		}
	})
}
