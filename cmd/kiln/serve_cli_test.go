package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

func TestSecondServeFailsNamingTheFirst(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir)
	var out, errs strings.Builder
	code := run(t.Context(), []string{"serve", "--data", dir}, strings.NewReader(""), &out, &errs)
	if code != exitFail || !strings.Contains(errs.String(), "held by another daemon") ||
		!strings.Contains(errs.String(), "pid "+strconv.Itoa(s.Cmd.Process.Pid)) {
		t.Fatalf("second serve: exit %d, %q", code, errs.String())
	}
}

func TestCLIWithoutADaemon(t *testing.T) {
	dir := clitest.ShortTemp(t)
	var out, errs strings.Builder
	if code := run(t.Context(), []string{"sessions", "list", "--data", dir}, strings.NewReader(""), &out, &errs); code != exitFail ||
		!strings.Contains(errs.String(), "no daemon serves") {
		t.Fatalf("sessions list without a daemon: %d %q", code, errs.String())
	}
	errs.Reset()
	if code := run(t.Context(), []string{"log", "--follow", "--data", dir}, strings.NewReader(""), &out, &errs); code != exitFail ||
		!strings.Contains(errs.String(), "kiln serve") {
		t.Fatalf("log --follow without a daemon: %d %q", code, errs.String())
	}
}
