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

// BenchmarkDecodeHostRequest is the host's cost to judge a cell's host request.
func BenchmarkDecodeHostRequest(b *testing.B) {
	payload := []byte(`{"version":1,"session_id":"root","generation":"g-1","message":{"kind":"host_request","id":"r-12","execution_id":"c-1","request":{"method":"runtime.inspect"}}}`)
	want := Expect{SessionID: "root", Generation: "g-1"}
	for b.Loop() {
		if _, err := Decode(payload, want); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeHostReply is the host's cost to frame a reply.
func BenchmarkEncodeHostReply(b *testing.B) {
	var buf []byte
	var err error
	value := []byte(`{"execution_id":"c-1","generation":"g-1","now":"2026-11-30T14:10:00Z","now_ms":1796047800000,"pending_inputs":[],"request_id":"r-12","requests_limit":128,"requests_made":12,"session_id":"root"}`)
	for b.Loop() {
		buf, err = AppendEnvelope(buf[:0], Envelope{SessionID: "root", Generation: "g-1",
			Message: HostReply{ID: "r-12", ExecutionID: "c-1", Reply: Reply{Kind: ReplyOK, Value: value}}})
		if err != nil {
			b.Fatal(err)
		}
	}
}
