package clitest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/client"
)

// AgentDir is a data directory whose kiln.toml runs the agent on a script route of
// replies, each a JSON line.
func AgentDir(t testing.TB, replies ...string) string {
	t.Helper()
	dir := ShortTemp(t)
	cfg := "[routes.test]\nkind = \"script\"\nscript = \"replies.jsonl\"\nprice_per_mtok = { input = 1.0, cached_input = 0.5, output = 2.0 }\n\n[agent]\nroute = \"test\"\n"
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "replies.jsonl"), []byte(strings.Join(replies, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// CodeReply is a script route's reply that runs code as the next cell.
func CodeReply(code string) string {
	b, _ := json.Marshal(map[string]string{"code": code})
	return string(b)
}

// ErrFound ends a followed stream: a test's callback returns it once it has read what it
// waited for.
var ErrFound = errors.New("found")

// Follow reads the session's event stream of the daemon on dir after seq until a kind
// in until appears, returning the events read.
func Follow(t testing.TB, dir, session string, after int64, until ...string) []client.Event {
	t.Helper()
	d, err := client.DialDaemon(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var got []client.Event
	err = d.Events(t.Context(), session, after, true, func(e client.Event) error {
		got = append(got, e)
		if slices.Contains(until, e.Kind) {
			return ErrFound
		}
		return nil
	})
	if !errors.Is(err, ErrFound) {
		t.Fatalf("the stream ended before %v: %v", until, err)
	}
	return got
}

// HasTimer says whether events hold an input a timer fired.
func HasTimer(events []client.Event) bool {
	return slices.ContainsFunc(events, func(e client.Event) bool {
		return e.Kind == "event" && strings.Contains(string(e.Raw), `"source":"timer"`)
	})
}

// EndReason is the end reason of a turn's end event e.
func EndReason(t testing.TB, e client.Event) string {
	var r struct {
		Record struct {
			Body struct {
				EndReason string `json:"end_reason"`
			} `json:"body"`
		} `json:"record"`
	}
	if err := json.Unmarshal(e.Raw, &r, json.RejectUnknownMembers(false)); err != nil {
		t.Fatal(err)
	}
	return r.Record.Body.EndReason
}

// FollowUntil reads the session's event stream of the daemon on dir after seq until an
// event for which found holds, and returns it.
func FollowUntil(t testing.TB, dir, session string, after int64, found func(client.Event) bool) client.Event {
	t.Helper()
	d, err := client.DialDaemon(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var got client.Event
	err = d.Events(t.Context(), session, after, true, func(e client.Event) error {
		if found(e) {
			got = e
			return ErrFound
		}
		return nil
	})
	if !errors.Is(err, ErrFound) {
		t.Fatalf("the stream ended first: %v", err)
	}
	return got
}

// KilnJSON runs kiln with args and decodes each line of its output into a new T.
func KilnJSON[T any](t testing.TB, args ...string) []T {
	t.Helper()
	out, err := Command(t, args...).Output()
	if err != nil {
		t.Fatalf("kiln %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var all []T
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(line), &v, json.RejectUnknownMembers(false)); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		all = append(all, v)
	}
	return all
}
