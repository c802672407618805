package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/spf13/cobra"
)

// runKiln runs the command line args in this process and returns its exit status,
// stdout and stderr.
func runKiln(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	status := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	return status, stdout.String(), stderr.String()
}

// TestJSONErrors checks that under --json an error is one JSON object on stdout, with
// its code, and the exit status of the human mode, which says it on stderr.
func TestJSONErrors(t *testing.T) {
	data := t.TempDir()
	if status, _, stderr := runKiln(t, "init", "--data", data); status != exitOK {
		t.Fatalf("kiln init: %d %s", status, stderr)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		code   string
	}{
		{"bad flag value", []string{"exec", "--timeout", "banana", "1"}, exitUsage, codeUsage},
		{"unknown flag", []string{"exec", "--no-such-flag"}, exitUsage, codeUsage},
		{"unknown command", []string{"no-such-command"}, exitUsage, codeUsage},
		{"too many arguments", []string{"version", "extra"}, exitUsage, codeUsage},
		{"no such session", []string{"log", "--data", data, "--session", "nobody"}, exitFail, codeNotFound},
		{"no record", []string{"log", "--data", t.TempDir()}, exitFail, codeNotFound},
		{"no daemon", []string{"sessions", "list", "--data", data}, exitFail, codeDaemonUnreachable},
		{"no interpreter", []string{"exec", "--data", data, "--python", "/nonexistent/python3", "1"}, exitFail, codeNotFound},
		{"no program", []string{"run", data + "/nonexistent.py"}, exitFail, codeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, stdout, stderr := runKiln(t, append(tc.args, "--json")...)
			if status != tc.status {
				t.Errorf("exit status %d; want %d", status, tc.status)
			}
			var got errorObject
			if err := json.Unmarshal([]byte(stdout), &got, json.RejectUnknownMembers(true)); err != nil {
				t.Fatalf("stdout %q: %v", stdout, err)
			}
			if got.Error.Code != tc.code || got.Error.Message == "" || strings.HasPrefix(got.Error.Message, "kiln: ") {
				t.Errorf("error %+v; want code %s and a message", got.Error, tc.code)
			}
			if strings.Count(stdout, "\n") != 1 || stderr != "" {
				t.Errorf("stdout %q, stderr %q; want one line on stdout alone", stdout, stderr)
			}

			status, stdout, stderr = runKiln(t, tc.args...)
			if status != tc.status || stdout != "" || !strings.HasPrefix(stderr, "kiln: "+got.Error.Message+"\n") {
				t.Errorf("human mode: %d, stdout %q, stderr %q; want %d and the message on stderr", status, stdout, stderr, tc.status)
			}
		})
	}
}

// TestJSONFailedCell checks that a cell that raised is a record, not an error object,
// and exits 1.
func TestJSONFailedCell(t *testing.T) {
	t.Parallel()
	status, stdout, _ := runKiln(t, "exec", "--json", "--data", t.TempDir(), "1/0")
	if status != exitFail {
		t.Errorf("exit status %d; want %d", status, exitFail)
	}
	var rec struct {
		Status    string `json:"status"`
		Exception struct {
			Type string `json:"type"`
		} `json:"exception"`
	}
	if err := json.Unmarshal([]byte(stdout), &rec); err != nil || rec.Status != "error" || rec.Exception.Type != "ZeroDivisionError" {
		t.Errorf("stdout %q (%v); want the record of a ZeroDivisionError", stdout, err)
	}
}

// TestJSONRequested checks how --json is found when cobra did not parse the flags.
func TestJSONRequested(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"exec", "--json"}, true},
		{[]string{"exec", "--json=true"}, true},
		{[]string{"exec", "--json=false"}, false},
		{[]string{"exec", "--", "--json"}, false},
		{[]string{"exec"}, false},
	} {
		if got := jsonRequested(nil, tc.args); got != tc.want {
			t.Errorf("jsonRequested(%q) = %v; want %v", tc.args, got, tc.want)
		}
	}
}

// TestEveryCommandTakesJSON walks the command tree: every command that runs takes
// --json, but cobra's own help and completion, which print for a person or a shell.
func TestEveryCommandTakesJSON(t *testing.T) {
	root := newRoot(strings.NewReader(""), io.Discard, io.Discard)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var walk func(*cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		if c.Name() == "help" || c.Name() == "completion" {
			return
		}
		if c.Runnable() {
			n++
			if f := c.Flags().Lookup(jsonFlag); f == nil || f.Value.Type() != "bool" {
				t.Errorf("%s takes no --json", c.CommandPath())
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if n < 30 {
		t.Errorf("%d commands walked; want the whole tree", n)
	}
}
