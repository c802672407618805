// Package wire implements kiln's runtime control protocol v1: length-prefixed frames on a
// worker's private socket, and the strict envelope and message vocabulary they carry.
//
// The rules are the specification's; docs/protocol.md pins the shapes it leaves open and
// the order in which a payload is judged, which the Python worker follows too.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxFrameSize is the largest payload a frame may carry, in bytes.
const MaxFrameSize = 1 << 20

// Errors a frame reader returns. A stream that fails with either is broken for good:
// no later frame may be read from it.
var (
	// ErrFrameSize is a length prefix of 0 or above MaxFrameSize.
	ErrFrameSize = errors.New("wire: frame length out of range 1..1048576")
	// ErrTruncated is a stream that ended inside a length prefix or a payload.
	ErrTruncated = errors.New("wire: stream ended inside a frame")
)

// ReadFrame reads one frame from r and returns its payload. The length is checked before
// any payload byte is read. A clean end of stream between frames returns io.EOF.
func ReadFrame(r io.Reader) ([]byte, error) {
	var prefix [4]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, ErrTruncated
		}
		return nil, err
	}
	n := binary.BigEndian.Uint32(prefix[:])
	if n == 0 || n > MaxFrameSize {
		return nil, fmt.Errorf("%w: got %d", ErrFrameSize, n)
	}
	payload := make([]byte, n)
	if got, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: %d of %d payload bytes", ErrTruncated, got, n)
		}
		return nil, err
	}
	return payload, nil
}

// AppendFrame appends payload to dst as one frame.
func AppendFrame(dst, payload []byte) ([]byte, error) {
	if len(payload) == 0 || len(payload) > MaxFrameSize {
		return dst, fmt.Errorf("%w: payload of %d bytes", ErrFrameSize, len(payload))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...), nil
}
