// Package jsonbuf builds JSON text by hand, member by member, for the few records the
// host encodes so often (a reply, a backlog record, per host request) that reflection
// would be most of their cost. What it builds is what json.Marshal gives for the same
// values; each user tests that.
package jsonbuf

import (
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// Buffer is JSON text being built. The first error, a string that is not valid UTF-8 or
// a raw value that is not valid JSON, is kept, and reported by Bytes.
type Buffer struct {
	buf []byte
	err error
}

// New returns a Buffer that appends to dst.
func New(dst []byte) *Buffer { return &Buffer{buf: dst} }

// Raw appends text as it is: punctuation and member names, written by the caller.
func (b *Buffer) Raw(text string) { b.buf = append(b.buf, text...) }

// String appends s as a JSON string.
func (b *Buffer) String(s string) {
	var err error
	b.buf, err = jsontext.AppendQuote(b.buf, s)
	b.keep(err)
}

// Int appends n.
func (b *Buffer) Int(n int64) { b.buf = strconv.AppendInt(b.buf, n, 10) }

// Value appends v, a JSON value, compacted.
func (b *Buffer) Value(v jsontext.Value) {
	var err error
	b.buf, err = jsontext.AppendFormat(b.buf, v)
	b.keep(err)
}

// Bytes returns the text built, or the first error met building it.
func (b *Buffer) Bytes() ([]byte, error) { return b.buf, b.err }

func (b *Buffer) keep(err error) {
	if b.err == nil {
		b.err = err
	}
}
