package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

func TestReadLinesAtTheLimitAndOnePast(t *testing.T) {
	atLimit := strings.Repeat("a", maxLineBytes)
	in := atLimit + "\n" + atLimit + "b\nnext\r\nlast"
	out := make(chan line)
	go readLines(strings.NewReader(in), out)
	var got []line
	for l := range out {
		got = append(got, l)
	}
	want := []line{{text: atLimit}, {tooLong: maxLineBytes + 1}, {text: "next\r"}, {text: "last"}}
	if len(got) != len(want) {
		t.Fatalf("got %d lines; want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %d bytes (tooLong %d); want %d bytes (tooLong %d)",
				i, len(got[i].text), got[i].tooLong, len(want[i].text), want[i].tooLong)
		}
	}
}

// TestReplRefusesALineOverTheLimit: the repl says so and goes on with the next line.
func TestReplRefusesALineOverTheLimit(t *testing.T) {
	t.Parallel()
	cmd := clitest.Command(t, "repl", "--data", t.TempDir())
	cmd.Stdin = strings.NewReader("x = '" + strings.Repeat("a", maxLineBytes) + "'\n1 + 1\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "an input line of 1048582 bytes was refused: a line is at most 1048576 bytes") {
		t.Errorf("stderr %q says nothing of the refusal", stderr.String())
	}
	if stdout.String() != "2\n" {
		t.Errorf("got stdout %q; want the next line run", stdout.String())
	}
}
