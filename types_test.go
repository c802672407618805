package kiln_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/perfstat"
)

// roundTrip marshals v with encoding/json, checks that its members are keys, unmarshals
// it into a new T and checks that it is v again; it returns the JSON as a map.
func roundTrip[T any](t *testing.T, v T, keys ...string) map[string]any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal(%+v): %v", v, err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	if got := slices.Sorted(maps.Keys(m)); !slices.Equal(got, slices.Sorted(slices.Values(keys))) {
		t.Errorf("%s: members %q; want %q", data, got, keys)
	}
	var back T
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("json.Unmarshal(%s): %v", data, err)
	}
	if !reflect.DeepEqual(back, v) {
		t.Errorf("%s came back as %+v; want %+v", data, back, v)
	}
	return m
}

// encoded is the text EncodeValue gives v, which must be a Value.
func encoded(t testing.TB, v kiln.Value) string {
	t.Helper()
	text, err := kiln.EncodeValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(text)
}

// recordKeys are the members of every record, as kiln exec --json prints them.
var recordKeys = []string{"session", "id", "generation", "status", "started_at", "duration_ms", "output",
	"truncated_bytes", "error", "exception", "namespace_lost"}

func TestRecordJSON(t *testing.T) {
	t.Parallel()
	wb := open(t)
	ctx := context.Background()
	for _, c := range []struct {
		code  string
		extra []string
	}{
		{"print('hi')\n6 * 7", nil},
		{"1 / 0", nil},
		{"import os\nos.write(1, b'raw\\n')", []string{"raw_stdout"}},
		{"class P:\n    def _repr_html_(self):\n        return '<b>x</b>'\ndisplay(P())", nil},
	} {
		rec, err := wb.Execute(ctx, c.code)
		if err != nil {
			t.Fatal(err)
		}
		m := roundTrip(t, rec, append(slices.Clone(recordKeys), c.extra...)...)
		// What kiln exec --json prints (its own encoder) is the same JSON value.
		printed, err := jsonv2.Marshal(rec, jsonv2.Deterministic(true))
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]any
		if err := json.Unmarshal(printed, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, want) {
			t.Errorf("%q: encoding/json gives %v; kiln exec --json prints %s", c.code, m, printed)
		}
	}
	rec, _ := wb.Execute(ctx, "1 / 0")
	if rec.Status != kiln.StatusError || rec.Exception == nil || rec.Exception.Type != "ZeroDivisionError" {
		t.Errorf("1 / 0: %+v; want an error with its exception", rec)
	}
	m := roundTrip(t, *rec.Exception, "type", "value", "traceback")
	if m["value"] != "division by zero" {
		t.Errorf("exception %v; want its value, division by zero", m)
	}
	roundTrip(t, kiln.Output{Stream: "display", Data: map[string]string{"text/plain": "x"}}, "stream", "data")
	roundTrip(t, kiln.RawTail{Text: "x", DroppedBytes: 3}, "text", "dropped_bytes")
}

func TestRecordJSONOfALimit(t *testing.T) {
	t.Parallel()
	wb := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	rec, err := wb.Execute(ctx, "import time\ntime.sleep(30)")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != kiln.StatusInterrupted || rec.Limit != kiln.LimitTimeout {
		t.Fatalf("%+v; want interrupted at the timeout", rec)
	}
	m := roundTrip(t, rec, append(slices.Clone(recordKeys), "limit")...)
	if m["limit"] != "timeout" || m["status"] != "interrupted" {
		t.Errorf("%v; want status interrupted, limit timeout", m)
	}
}

func TestValueJSON(t *testing.T) {
	o := kiln.NewObject(
		kiln.Member{Key: "name", Value: kiln.String("kiln")},
		kiln.Member{Key: "1", Value: kiln.Bool(true)},
		kiln.Member{Key: "big", Value: kiln.Number(1 << 60)},
		kiln.Member{Key: "list", Value: kiln.Array{nil, kiln.String("\xed\xa0\x80"), kiln.NewObject()}},
	)
	data, err := json.Marshal(o)
	if want := `{"1":true,"name":"kiln","big":1152921504606846976,"list":[null,"\ud800",{}]}`; err != nil || string(data) != want {
		t.Fatalf("json.Marshal(object) = %s, %v; want %s", data, err, want)
	}
	var back kiln.Object
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back, o) {
		t.Errorf("json.Unmarshal(%s) = %v, %v; want the object again", data, back, err)
	}
	if got := encoded(t, back); got != string(data) {
		t.Errorf("EncodeValue = %s; want %s", got, data)
	}
	var arr kiln.Array
	if err := json.Unmarshal([]byte(`[1,"a",[]]`), &arr); err != nil || len(arr) != 3 {
		t.Errorf("json.Unmarshal into an Array = %v, %v", arr, err)
	}
	var s kiln.String
	if err := json.Unmarshal([]byte(`"\udfff"`), &s); err != nil || s != "\xed\xbf\xbf" {
		t.Errorf("a lone surrogate: %q, %v; want it kept", s, err)
	}
	if err := json.Unmarshal([]byte(`[1]`), &back); err == nil {
		t.Error("an array into an Object: no error")
	}
	v, err := kiln.DecodeValue(data)
	if err != nil || !reflect.DeepEqual(v, kiln.Value(o)) {
		t.Errorf("DecodeValue = %v, %v", v, err)
	}
	if _, err := kiln.DecodeValue([]byte(`{"a":`)); err == nil {
		t.Error("DecodeValue of a cut text: no error")
	}
	// A program's value as a field of a caller's own struct.
	type reply struct {
		Value kiln.Object `json:"value"`
	}
	roundTrip(t, reply{o}, "value")
}

func TestNewObjectOrdersAsObjectKeys(t *testing.T) {
	o := kiln.NewObject(
		kiln.Member{Key: "b", Value: kiln.Number(1)},
		kiln.Member{Key: "10", Value: kiln.Number(2)},
		kiln.Member{Key: "a", Value: kiln.Number(3)},
		kiln.Member{Key: "2", Value: kiln.Number(4)},
		kiln.Member{Key: "b", Value: kiln.Number(5)},
	)
	if got, want := encoded(t, o), `{"2":4,"10":2,"b":5,"a":3}`; got != want {
		t.Errorf("NewObject: %s; want %s", got, want)
	}
	if v, ok := o.Get("b"); o.Len() != 4 || !ok || v != kiln.Number(5) {
		t.Errorf("Len %d, Get(b) %v %v; want 4, 5", o.Len(), v, ok)
	}
	if _, ok := o.Get("c"); ok {
		t.Error("Get(c): found")
	}
}

// A value nested 100,000 deep crosses into and out of kiln's types without
// recursion.
func TestDeepValue(t *testing.T) {
	t.Parallel()
	const depth = 100_000
	text := strings.Repeat(`[{"a":`, depth) + "1" + strings.Repeat("}]", depth)
	v, err := kiln.DecodeValue([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := encoded(t, v); got != text {
		t.Errorf("EncodeValue(DecodeValue(text)) is %d bytes, not the %d of the text", len(got), len(text))
	}
	inner := v
	for range depth {
		o, _ := inner.(kiln.Array)[0].(kiln.Object)
		inner, _ = o.Get("a")
	}
	if inner != kiln.Number(1) {
		t.Errorf("at the bottom: %v; want 1", inner)
	}
}

func TestProgramTypesJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, src := range []string{
		"print('working')\nreturn {'n': await t.twice(21), 'ok': True}",
		"raise ValueError('no')",
	} {
		res, err := kiln.Run(ctx, kiln.Program{Source: src, Namespaces: []kiln.Namespace{{
			Global: "t",
			Funcs: map[string]kiln.Func{"twice": func(_ context.Context, args kiln.Value) (kiln.Value, error) {
				return args.(kiln.Number) * 2, nil
			}},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		// The times are written in whole milliseconds, as a cell record's duration_ms.
		res.Wall, res.CPU = res.Wall.Truncate(time.Millisecond), res.CPU.Truncate(time.Millisecond)
		if res.Sandbox != nil {
			// What confined the run, as its JSON says it: the host's own handle on the
			// run's cgroup is not part of it.
			data, err := json.Marshal(res.Sandbox)
			if err != nil {
				t.Fatal(err)
			}
			res.Sandbox = new(kiln.SandboxApplied)
			if err := json.Unmarshal(data, res.Sandbox); err != nil {
				t.Fatal(err)
			}
		}
		m := roundTrip(t, res, "status", "value", "logs", "error", "wall_ms", "cpu_ms", "exit_code", "signal", "sandbox")
		if m["wall_ms"] != float64(res.Wall.Milliseconds()) || m["cpu_ms"] != float64(res.CPU.Milliseconds()) {
			t.Errorf("%s: wall_ms %v, cpu_ms %v; want %d, %d", src, m["wall_ms"], m["cpu_ms"], res.Wall.Milliseconds(), res.CPU.Milliseconds())
		}
		switch res.Status {
		case kiln.RunOK:
			if want := map[string]any{"n": 42.0, "ok": true}; !reflect.DeepEqual(m["value"], want) || m["error"] != nil {
				t.Errorf("%s: %v; want value %v", src, m, want)
			}
		case kiln.RunException:
			if m["value"] != nil || m["error"] == nil {
				t.Errorf("%s: %v; want an error and no value", src, m)
			}
		default:
			t.Errorf("%s: %+v", src, res)
		}
	}
	limits := kiln.Limits{CPUSeconds: 2, Wall: 1500 * time.Millisecond, AddressSpaceBytes: 1 << 30,
		MaxLogBytes: 100, MaxValueBytes: 200, MaxProcesses: 3}
	m := roundTrip(t, limits, "cpu_seconds", "wall_ms", "memory_bytes", "max_log_bytes", "max_value_bytes", "max_processes")
	if m["wall_ms"] != 1500.0 {
		t.Errorf("wall_ms %v; want 1500", m["wall_ms"])
	}
	// The daemon takes whole milliseconds: a finer limit is rounded up, never shortened.
	if data, err := json.Marshal(kiln.Limits{Wall: 1500*time.Millisecond + 7}); err != nil || !strings.Contains(string(data), `"wall_ms":1501,`) {
		t.Errorf("a wall clock of 1.500000007s: %s, %v; want wall_ms 1501", data, err)
	}
	const maxWallMS = math.MaxInt64 / int64(time.Millisecond)
	for wallMS, ok := range map[int64]bool{maxWallMS: true, maxWallMS + 1: false, 0: true, -1: false} {
		var l kiln.Limits
		err := json.Unmarshal([]byte(fmt.Sprintf(`{"wall_ms":%d}`, wallMS)), &l)
		if (err == nil) != ok || ok && l.Wall != time.Duration(wallMS)*time.Millisecond {
			t.Errorf("wall_ms %d: %v, %v; want accepted %v", wallMS, l.Wall, err, ok)
		}
	}
	ns := kiln.Namespace{Global: "kiln", ErrorClass: &kiln.ErrorClass{Name: "KilnError", MemberNameProperty: "member"},
		MaxConcurrent: 1}
	roundTrip(t, ns, "global", "error_class", "max_concurrent")
	roundTrip(t, *ns.ErrorClass, "name", "member_name_property")
	roundTrip(t, kiln.Program{Source: "return 1", Namespaces: []kiln.Namespace{ns}, Limits: limits},
		"source", "namespaces", "limits")
	// The bindings stay out of JSON.
	withFuncs := ns
	withFuncs.Funcs = map[string]kiln.Func{"read_file": nil}
	if data, err := json.Marshal(withFuncs); err != nil || string(data) != string(must(json.Marshal(ns))) {
		t.Errorf("a namespace with funcs: %s, %v; want them left out", data, err)
	}
}

// BenchmarkProgramBinding is one call of a program's binding through the public API,
// its argument and reply a small object that crosses into kiln's values and back: p50
// and p99 between calls, and the CPU per call of the host and the program together.
func BenchmarkProgramBinding(b *testing.B) {
	r, err := kiln.NewRunner(context.Background(), kiln.RunnerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var mu sync.Mutex
	var stamps []time.Time
	ns := kiln.Namespace{Global: "tools", Funcs: map[string]kiln.Func{
		"echo": func(_ context.Context, v kiln.Value) (kiln.Value, error) {
			mu.Lock()
			stamps = append(stamps, time.Now())
			mu.Unlock()
			return v, nil
		},
	}}
	src := fmt.Sprintf("for i in range(%d):\n    await tools.echo({'i': i, 'name': 'notes.txt', 'tags': ['a', 'b'], 'size': 1234})\nreturn 1", b.N+1)
	m := perfstat.Start()
	b.ResetTimer()
	res, err := r.Run(context.Background(), kiln.Program{Source: src, Namespaces: []kiln.Namespace{ns},
		Limits: kiln.Limits{CPUSeconds: 600}})
	b.StopTimer()
	if err != nil || res.Status != kiln.RunOK {
		b.Fatalf("%v %+v", err, res)
	}
	for i := 1; i < len(stamps); i++ {
		m.Add(stamps[i].Sub(stamps[i-1]))
	}
	f := m.Figures(b.N)
	b.ReportMetric(f.P50, "p50-µs")
	b.ReportMetric(f.P99, "p99-µs")
	b.ReportMetric(f.CPU+float64(res.CPU.Microseconds())/float64(b.N), "cpu-µs/op")
}

func must(data []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return data
}

// A program's value is JSON as encoding/json writes it, its members in their order.
func ExampleNewObject() {
	o := kiln.NewObject(
		kiln.Member{Key: "name", Value: kiln.String("kiln")},
		kiln.Member{Key: "hits", Value: kiln.Array{kiln.Number(1), kiln.Number(2)}},
	)
	data, _ := json.Marshal(o)
	fmt.Println(string(data))
	// Output: {"name":"kiln","hits":[1,2]}
}
