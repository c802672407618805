package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestTheTCPDoors checks the Host and Authorization checks of a listener with a token:
// loopback names and allowed ones pass, others are misdirected; the scheme's case is
// free, the token's is not.
func TestTheTCPDoors(t *testing.T) {
	const token = "s3cret"
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	srv := httptest.NewServer(hostCheck([]string{"kiln.example"}, bearer(token, ok)))
	defer srv.Close()
	for _, c := range []struct {
		host, auth string
		want       int
	}{
		{"", "Bearer " + token, http.StatusNoContent}, // the listener's own 127.0.0.1:port
		{"localhost:1234", "Bearer " + token, http.StatusNoContent},
		{"LOCALHOST", "Bearer " + token, http.StatusNoContent},
		{"[::1]:80", "Bearer " + token, http.StatusNoContent},
		{"127.0.0.2", "Bearer " + token, http.StatusNoContent},
		{"kiln.example:8765", "Bearer " + token, http.StatusNoContent},
		{"KILN.example", "Bearer " + token, http.StatusNoContent},
		{"evil.example", "Bearer " + token, http.StatusMisdirectedRequest},
		{"kiln.example.evil", "Bearer " + token, http.StatusMisdirectedRequest},
		{"127.0.0.1.nip.io", "Bearer " + token, http.StatusMisdirectedRequest},
		{"", "bearer " + token, http.StatusNoContent},
		{"", "BEARER " + token, http.StatusNoContent},
		{"", "Bearer  " + token, http.StatusNoContent},
		{"", "Bearer " + token + "x", http.StatusUnauthorized},
		{"", "Bearer S3CRET", http.StatusUnauthorized},
		{"", "Basic " + token, http.StatusUnauthorized},
		{"", "Bearer", http.StatusUnauthorized},
		{"", "", http.StatusUnauthorized},
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/sessions", nil)
		if c.host != "" {
			req.Host = c.host
		}
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("Host %q, Authorization %q: %d; want %d", c.host, c.auth, resp.StatusCode, c.want)
		}
	}
}

// TestAnEmptyTokenLetsNoOneIn checks that a listener given an empty token by mistake
// refuses every request rather than none.
func TestAnEmptyTokenLetsNoOneIn(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	srv := httptest.NewServer(bearer("", ok))
	defer srv.Close()
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer  "} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q with an empty token: %d; want 401", auth, resp.StatusCode)
		}
	}
}
