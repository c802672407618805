package kiln

import (
	"reflect"
	"testing"
)

// TestUnshownIsTheRecordPastWhatWasShown: a reader whose live output ended early is
// handed the rest of the record, nothing twice, its results aside.
func TestUnshownIsTheRecordPastWhatWasShown(t *testing.T) {
	display := Output{Stream: "display", Data: map[string]string{"text/plain": "H()"}}
	record := []Output{{Stream: "stdout", Text: "ab"}, display, {Stream: "stderr", Text: "e"}, {Stream: "result", Text: "1"}}
	for _, c := range []struct {
		shown, want []Output
	}{
		{nil, record[:3]},
		{[]Output{{Stream: "stdout", Text: "a"}}, []Output{{Stream: "stdout", Text: "b"}, display, record[2]}},
		{[]Output{record[0]}, record[1:3]},
		{record[:2], record[2:3]},
		{record[:3], nil},
		{[]Output{{Stream: "stderr", Text: "x"}}, record[:3]}, // not a prefix: the record whole
	} {
		if got := unshown(c.shown, record); !reflect.DeepEqual(got, c.want) && len(got)+len(c.want) > 0 {
			t.Errorf("shown %+v: got %+v; want %+v", c.shown, got, c.want)
		}
	}
}
