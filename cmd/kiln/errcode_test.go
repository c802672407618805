package main

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/journal"
)

// TestDaemonCodes maps each of the daemon's problem codes, every one package kiln
// defines, to the command line's code.
func TestDaemonCodes(t *testing.T) {
	table := []struct {
		name, problem, want string
	}{
		{"ProblemMalformedJSON", client.ProblemMalformedJSON, codeDaemonRefused},
		{"ProblemUnknownField", client.ProblemUnknownField, codeDaemonRefused},
		{"ProblemInvalid", client.ProblemInvalid, codeDaemonRefused},
		{"ProblemProgramInvalid", client.ProblemProgramInvalid, codeDaemonRefused},
		{"ProblemUnauthorized", client.ProblemUnauthorized, codeDaemonRefused},
		{"ProblemFileRefused", client.ProblemFileRefused, codeDaemonRefused},
		{"ProblemNotFound", client.ProblemNotFound, codeNotFound},
		{"ProblemNoSession", client.ProblemNoSession, codeNotFound},
		{"ProblemNoExecution", client.ProblemNoExecution, codeNotFound},
		{"ProblemNoDisplay", client.ProblemNoDisplay, codeNotFound},
		{"ProblemFileNotFound", client.ProblemFileNotFound, codeNotFound},
		{"ProblemMethodNotAllowed", client.ProblemMethodNotAllowed, codeDaemonRefused},
		{"ProblemBusy", client.ProblemBusy, codeBusy},
		{"ProblemSessionExists", client.ProblemSessionExists, codeDaemonRefused},
		{"ProblemSettingsDiffer", client.ProblemSettingsDiffer, codeDaemonRefused},
		{"ProblemNotRunning", client.ProblemNotRunning, codeNotRunning},
		{"ProblemNoAgent", client.ProblemNoAgent, codeDaemonRefused},
		{"ProblemKeyReused", client.ProblemKeyReused, codeDaemonRefused},
		{"ProblemHeldElsewhere", client.ProblemHeldElsewhere, codeDaemonRefused},
		{"ProblemSessionStopped", client.ProblemSessionStopped, codeStopped},
		{"ProblemTooLarge", client.ProblemTooLarge, codeDaemonRefused},
		{"ProblemMediaType", client.ProblemMediaType, codeDaemonRefused},
		{"ProblemTooMany", client.ProblemTooMany, codeDaemonRefused},
		{"ProblemInternal", client.ProblemInternal, codeDaemonRefused},
		{"ProblemUnavailable", client.ProblemUnavailable, codeDaemonRefused},
	}
	named := map[string]bool{}
	for _, tc := range table {
		named[tc.name] = true
		err := fmt.Errorf("wrapped: %w", &client.DaemonError{Status: 400, Code: tc.problem, Detail: "d"})
		if got := errorCode(err); got != tc.want {
			t.Errorf("%s (%s): code %s; want %s", tc.name, tc.problem, got, tc.want)
		}
		if got := exitStatus(err); got != exitFail {
			t.Errorf("%s: exit status %d; want %d", tc.name, got, exitFail)
		}
	}
	for _, name := range problemConstants(t) {
		if !named[name] {
			t.Errorf("client.%s is not in the table", name)
		}
	}
	if got := daemonCode("a_code_of_a_later_daemon"); got != codeDaemonRefused {
		t.Errorf("an unknown problem code: %s; want %s", got, codeDaemonRefused)
	}
}

// problemConstants are the names of package client's Problem constants.
func problemConstants(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../client/client.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		if v, ok := n.(*ast.ValueSpec); ok {
			for _, id := range v.Names {
				if strings.HasPrefix(id.Name, "Problem") {
					names = append(names, id.Name)
				}
			}
		}
		return true
	})
	if len(names) == 0 {
		t.Fatal("no Problem constant in client.go")
	}
	return names
}

// TestErrorCodes checks the code and exit status of an error of each kind, and that
// they are the ones docs/cli.md's table gives, every code of it covered.
func TestErrorCodes(t *testing.T) {
	table := []struct {
		err  error
		code string
		exit int
	}{
		{usageError{errors.New("bad flag")}, codeUsage, exitUsage},
		{fmt.Errorf("x: %w", usageError{errors.New("wrapped")}), codeUsage, exitUsage},
		{codedError{codeDaemonUnreachable, errors.New("no daemon")}, codeDaemonUnreachable, exitFail},
		{fmt.Errorf("x: %w", journal.ErrNoSession), codeNotFound, exitFail},
		{fmt.Errorf("x: %w", journal.ErrNoRecord), codeNotFound, exitFail},
		{&fs.PathError{Op: "open", Path: "p", Err: fs.ErrNotExist}, codeNotFound, exitFail},
		{fmt.Errorf("x: %w", kiln.ErrBusy), codeBusy, exitFail},
		{&client.DaemonError{Code: client.ProblemBusy}, codeBusy, exitFail},
		{fmt.Errorf("x: %w", kiln.ErrSessionHeld), codeSessionHeld, exitFail},
		{&client.DaemonError{Code: client.ProblemSessionStopped}, codeStopped, exitFail},
		{fmt.Errorf("x: %w", kiln.ErrNotRunning), codeNotRunning, exitFail},
		{fmt.Errorf("x: %w", client.ErrNoDaemon), codeDaemonUnreachable, exitFail},
		{fmt.Errorf("x: %w", daemon.ErrRunning), codeDaemonRunning, exitFail},
		{&client.DaemonError{Code: client.ProblemInvalid}, codeDaemonRefused, exitFail},
		{fmt.Errorf("x: %w", kiln.ErrClosed), codeClosed, exitFail},
		{fmt.Errorf("x: %w", kiln.ErrRunnerClosed), codeClosed, exitFail},
		{fmt.Errorf("x: %w", context.Canceled), codeInterrupted, exitFail},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), codeTimeout, exitFail},
		{errors.New("anything"), codeFailed, exitFail},
	}
	got := map[string]int{}
	for _, tc := range table {
		if code := errorCode(tc.err); code != tc.code {
			t.Errorf("%v: code %s; want %s", tc.err, code, tc.code)
		}
		if exit := exitStatus(tc.err); exit != tc.exit {
			t.Errorf("%v: exit status %d; want %d", tc.err, exit, tc.exit)
		}
		got[tc.code] = tc.exit
	}
	if exitStatus(nil) != exitOK || exitStatus(fmt.Errorf("x: %w", errNotOK)) != exitFail {
		t.Errorf("exit status of success %d, of a cell not ok %d; want %d, %d", exitStatus(nil), exitStatus(errNotOK), exitOK, exitFail)
	}
	documented := documentedCodes(t)
	for code, exit := range documented {
		if e, ok := got[code]; !ok {
			t.Errorf("docs/cli.md's code %s is not in the table", code)
		} else if e != exit {
			t.Errorf("code %s exits %d; docs/cli.md says %d", code, e, exit)
		}
	}
	for code := range got {
		if _, ok := documented[code]; !ok {
			t.Errorf("code %s is not in docs/cli.md", code)
		}
	}
}

// documentedCodes are the codes of docs/cli.md's table of error codes, with their exit
// statuses.
func documentedCodes(t *testing.T) map[string]int {
	t.Helper()
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "## Error codes")
	table, _, _ = strings.Cut(table, "\n## ")
	codes := map[string]int{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (\\d) \\|").FindAllStringSubmatch(table, -1) {
		codes[m[1]], _ = strconv.Atoi(m[2])
	}
	if len(codes) < 10 {
		t.Fatalf("docs/cli.md's table of error codes has %d codes", len(codes))
	}
	return codes
}
