package serve

import (
	"bytes"
	"testing"
)

func TestDisplaysOfARecord(t *testing.T) {
	out := `[{"stream":"stdout","text":"hi"},{"stream":"display","data":{"text/plain":"P","text/html":"<b>",` +
		`"image/jpeg":"/9g="}},{"stream":"display","data":{"text/plain":"T","text/html":"<i>"}},{"stream":"result","text":"1"}]`
	ds := Record{Output: []byte(out)}.Displays()
	if len(ds) != 2 {
		t.Fatalf("displays: %+v", ds)
	}
	if ds[0].Index != 0 || ds[0].MIMEType != "image/jpeg" || ds[0].Plain != "P" {
		t.Errorf("0: %+v", ds[0])
	}
	if b, err := ds[0].Content(); err != nil || !bytes.Equal(b, []byte{0xff, 0xd8}) {
		t.Errorf("0's content: %x %v", b, err)
	}
	if ds[1].Index != 1 || ds[1].MIMEType != "text/html" {
		t.Errorf("1: %+v", ds[1])
	}
	if b, err := ds[1].Content(); err != nil || string(b) != "<i>" {
		t.Errorf("1's content: %q %v", b, err)
	}
	if ds := (Record{}).Displays(); ds != nil {
		t.Errorf("a running record: %+v", ds)
	}
}
