package wire

import "testing"

// BenchmarkDecodeCompleted is the host's cost to judge a trivial cell's completion.
func BenchmarkDecodeCompleted(b *testing.B) {
	payload := []byte(`{"version":1,"session_id":"root","generation":"g-1","message":{"kind":"completed","id":"c-1","result":{"kind":"cell","status":"ok","output":[{"stream":"result","text":"2"}],"truncated_bytes":0,"error":null}}}`)
	want := Expect{SessionID: "root", Generation: "g-1"}
	for b.Loop() {
		if _, err := Decode(payload, want); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeExecute is the host's cost to frame a trivial cell.
func BenchmarkEncodeExecute(b *testing.B) {
	var buf []byte
	var err error
	for b.Loop() {
		buf, err = AppendEnvelope(buf[:0], Envelope{SessionID: "root", Generation: "g-1", Message: Execute{ID: "c-1", Code: "1+1"}})
		if err != nil {
			b.Fatal(err)
		}
	}
}
