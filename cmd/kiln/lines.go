package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// maxLineBytes is the longest input line kiln repl takes, its newline aside; a longer
// line is refused whole, said so, and reading goes on.
const maxLineBytes = 1 << 20

// line is one line read, without its newline, or the refusal of one too long.
type line struct {
	text    string
	tooLong int64 // the refused line's length in bytes; 0 for a line taken
}

// refusal says that a line was refused, for a person.
func (l line) refusal() string {
	return fmt.Sprintf("[kiln] an input line of %d bytes was refused: a line is at most %d bytes\n", l.tooLong, maxLineBytes)
}

// readLines sends each line of in to out, holding at most maxLineBytes of one, and
// closes out at the end of in.
func readLines(in io.Reader, out chan<- line) {
	defer close(out)
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		var buf []byte
		var n int64
		var err error
		for {
			var chunk []byte
			chunk, err = r.ReadSlice('\n')
			n += int64(len(chunk))
			if n <= maxLineBytes+1 {
				buf = append(buf, chunk...)
			}
			if err != bufio.ErrBufferFull {
				break
			}
		}
		if n == 0 && err != nil {
			return
		}
		if err == nil { // the line ended with its newline
			n--
			if len(buf) > 0 {
				buf = buf[:len(buf)-1]
			}
		}
		if n > maxLineBytes {
			out <- line{tooLong: n}
		} else {
			out <- line{text: string(buf)}
		}
		if err != nil {
			return
		}
	}
}

// errLineTooLong is an answer to input() refused for its length.
var errLineTooLong = errors.New("the line typed was over 1 MiB")

// lineAnswerer answers a cell's input() with the next of lines, showing the prompt on
// prompts, and says so on stderr when that line was refused.
func lineAnswerer(prompts, stderr io.Writer, lines <-chan line) func(context.Context, string, string) (string, error) {
	return func(ctx context.Context, _, prompt string) (string, error) {
		io.WriteString(prompts, prompt)
		select {
		case l, ok := <-lines:
			switch {
			case !ok:
				return "", io.EOF
			case l.tooLong > 0:
				io.WriteString(stderr, l.refusal())
				return "", errLineTooLong
			}
			return l.text, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// terminalAnswerer answers input() from stdin when it is a terminal, reading it only
// once a cell asks; otherwise no one answers.
func terminalAnswerer(stdin io.Reader, prompts, stderr io.Writer) func(context.Context, string, string) (string, error) {
	f, ok := stdin.(*os.File)
	if !ok || !isTerminal(f) {
		return nil
	}
	lines := make(chan line)
	start := sync.OnceFunc(func() { go readLines(f, lines) })
	answer := lineAnswerer(prompts, stderr, lines)
	return func(ctx context.Context, cellID, prompt string) (string, error) {
		start()
		return answer(ctx, cellID, prompt)
	}
}
