// Package regfile opens and reads files that another process may have put in place: a
// cache entry, a skill, an instruction source, a file a program or a client names.
//
// A file is opened without waiting (a FIFO or a device in its place would hold an open
// or a read for as long as its writer likes) and without taking a controlling terminal.
// It is judged on the descriptor opened, so a swap after any earlier check cannot slip
// past: only a regular file is returned. It is read within a bound, and a file over the
// bound is refused, never cut short.
package regfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

var (
	// ErrNotRegular is a path that names something other than a regular file.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge is a file over the bound its reader set.
	ErrTooLarge = errors.New("over its bound")
)

// flags open a file for reading, not waiting, with no controlling terminal.
const flags = os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOCTTY

// File is a regular file opened for reading.
type File struct {
	*os.File
	// Info describes the file as it was opened.
	Info fs.FileInfo
	name string // as the caller named it, for errors
}

// Open opens the regular file at path. With noFollow, a symlink in its place is refused
// (the error wraps syscall.ELOOP) rather than followed.
func Open(path string, noFollow bool) (*File, error) {
	flag := flags
	if noFollow {
		flag |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flag, 0)
	return checked(f, path, err)
}

// OpenIn opens the regular file path within root: never out of it, through .. or a
// symlink.
func OpenIn(root *os.Root, path string) (*File, error) {
	f, err := root.OpenFile(path, flags, 0)
	return checked(f, path, err)
}

// checked returns f, named name, if it opened (err is nil) as a regular file.
func checked(f *os.File, name string, err error) (*File, error) {
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	switch {
	case err != nil:
		err = fmt.Errorf("regfile: %s: %w", name, err)
	case !info.Mode().IsRegular():
		err = &refusal{what: name + " is not a regular file", is: ErrNotRegular}
		if info.IsDir() {
			err = &refusal{what: name + " is a directory", is: ErrNotRegular}
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &File{File: f, Info: info, name: name}, nil
}

// ReadAll reads the file whole, in one buffer sized as it was opened: at most max
// bytes. A file that holds more, or held more when it was opened (then it is not read),
// is an error wrapping ErrTooLarge.
func (f *File) ReadAll(max int64) ([]byte, error) {
	tooLarge := &refusal{what: fmt.Sprintf("%s is larger than %d bytes", f.name, max), is: ErrTooLarge}
	if f.Info.Size() > max {
		return nil, tooLarge
	}
	buf := bytes.NewBuffer(make([]byte, 0, f.Info.Size()+1))
	if _, err := buf.ReadFrom(io.LimitReader(f.File, max+1)); err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.name, err)
	}
	if int64(buf.Len()) > max {
		return nil, tooLarge
	}
	return buf.Bytes(), nil
}

// refusal is a file refused, said in the caller's terms: it is one of the package's
// errors, and its text names the file.
type refusal struct {
	what string
	is   error
}

func (r *refusal) Error() string        { return r.what }
func (r *refusal) Is(target error) bool { return target == r.is }
