package serve

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/wire"
)

// ErrNoDisplay says an execution has no display item of the index asked for.
var ErrNoDisplay = errors.New("serve: no such display item")

// displayOrder is the MIME types a display item is served as, richest first: the first
// its bundle has. text/plain, always present, ends the list.
var displayOrder = [...]string{wire.MIMEPNG, wire.MIMEJPEG, wire.MIMESVG, wire.MIMEHTML,
	wire.MIMEMarkdown, wire.MIMELatex, wire.MIMEJSON, wire.MIMEPlain}

// Display is one display item of a finished cell: the n-th record of stream "display"
// in its output, counted from 0.
type Display struct {
	Index    int               `json:"index"`
	MIMEType string            `json:"mime_type"` // the type it is served as
	Plain    string            `json:"text_plain"`
	Data     map[string]string `json:"-"` // the bundle; image types base64
}

// Content is d's body in its MIMEType, base64 decoded for the binary types.
func (d Display) Content() ([]byte, error) {
	v := d.Data[d.MIMEType]
	if _, binary := wire.DisplayMIME(d.MIMEType); binary {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("serve: display %d: %w", d.Index, err)
		}
		return b, nil
	}
	return []byte(v), nil
}

// Displays returns r's display items in order; none while it runs.
func (r Record) Displays() []Display {
	if len(r.Output) == 0 {
		return nil
	}
	var outputs []wire.Output
	if json.Unmarshal(r.Output, &outputs, json.RejectUnknownMembers(false)) != nil {
		return nil
	}
	var ds []Display
	for _, o := range outputs {
		if o.Stream != wire.StreamDisplay {
			continue
		}
		d := Display{Index: len(ds), Data: o.Data, Plain: o.Data[wire.MIMEPlain], MIMEType: wire.MIMEPlain}
		for _, m := range displayOrder {
			if _, ok := o.Data[m]; ok {
				d.MIMEType = m
				break
			}
		}
		ds = append(ds, d)
	}
	return ds
}

// ParseDisplayIndex reads a display item's index: a decimal from 0, with no sign or
// leading zero; anything else names no item (ErrNoDisplay).
func ParseDisplayIndex(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("%w: %q is not a display item's number", ErrNoDisplay, s)
	}
	return n, nil
}

// Display returns the n-th display item of the session's cell.
func (s *Session) Display(ctx context.Context, cell string, n int) (Display, error) {
	rec, err := s.Record(ctx, cell)
	if err != nil {
		return Display{}, err
	}
	ds := rec.Displays()
	if n < 0 || n >= len(ds) {
		return Display{}, fmt.Errorf("%w: %s has %d, not one numbered %d", ErrNoDisplay, rec.ID, len(ds), n)
	}
	return ds[n], nil
}
