package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/client"
)

// liveCall shows the model call streaming now as kiln chat prints it: its text line by
// line ("model: …"), and the code of its python call line by line ("  | …") as the
// call's arguments stream.
type liveCall struct {
	key        string // turn/call of the pieces gathered
	text, args strings.Builder
	textDone   int // bytes of text printed
	codeDone   int // bytes of code printed
}

// piece takes a model.delta event and prints the lines it completes.
func (l *liveCall) piece(w io.Writer, e client.Event) {
	var d struct {
		Turn  int64  `json:"turn"`
		Call  int    `json:"call"`
		Delta string `json:"delta"`
		Text  string `json:"text"`
	}
	if json.Unmarshal(e.Raw, &d, json.RejectUnknownMembers(false)) != nil {
		return
	}
	if key := fmt.Sprint(d.Turn, "/", d.Call); key != l.key || d.Delta == "restart" {
		l.flush(w)
		*l = liveCall{key: key}
	}
	switch d.Delta {
	case "text":
		l.text.WriteString(d.Text)
	case "arguments":
		l.args.WriteString(d.Text)
	}
	l.lines(w, false)
}

// flush prints what is left of the call's lines: the call ended.
func (l *liveCall) flush(w io.Writer) {
	l.lines(w, true)
	*l = liveCall{}
}

// lines prints the complete lines not yet printed, and the last one too when all.
func (l *liveCall) lines(w io.Writer, all bool) {
	l.textDone = printLines(w, "model: ", l.text.String(), l.textDone, all)
	l.codeDone = printLines(w, "  | ", partialCode(l.args.String()), l.codeDone, all)
}

// printLines prints text's lines from done on, each after prefix, and returns how much
// of text is printed: up to its last newline, or all of it when all.
func printLines(w io.Writer, prefix, text string, done int, all bool) int {
	if done > len(text) {
		return done
	}
	rest := text[done:]
	end := strings.LastIndexByte(rest, '\n') + 1
	if all {
		end = len(rest)
	}
	for _, line := range strings.SplitAfter(rest[:end], "\n") {
		if line = strings.TrimRight(line, "\n"); line != "" {
			fmt.Fprintf(w, "%s%s\n", prefix, line)
		}
	}
	return done + end
}

// partialCode is the value of the "code" member of args, a JSON object that may be cut
// anywhere, decoded as far as it goes.
func partialCode(args string) string {
	i := strings.Index(args, `"code"`)
	if i < 0 {
		return ""
	}
	rest := strings.TrimLeft(args[i+len(`"code"`):], " \t\r\n")
	if !strings.HasPrefix(rest, ":") {
		return ""
	}
	rest = strings.TrimLeft(rest[1:], " \t\r\n")
	if !strings.HasPrefix(rest, `"`) {
		return ""
	}
	rest = rest[1:]
	var b strings.Builder
	for len(rest) > 0 {
		c := rest[0]
		switch {
		case c == '"':
			return b.String()
		case c != '\\':
			r, n := utf8.DecodeRuneInString(rest)
			b.WriteRune(r)
			rest = rest[n:]
			continue
		case len(rest) < 2:
			return b.String()
		}
		switch rest[1] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if len(rest) < 6 {
				return b.String()
			}
			n, err := strconv.ParseUint(rest[2:6], 16, 32)
			if err != nil {
				return b.String()
			}
			b.WriteRune(rune(n)) // a surrogate half reads as U+FFFD
			rest = rest[6:]
			continue
		default: // \" \\ \/
			b.WriteByte(rest[1])
		}
		rest = rest[2:]
	}
	return b.String()
}
