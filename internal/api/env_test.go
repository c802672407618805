package api_test

import (
	kilndaemon "github.com/kilnrt/kiln/daemon"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestSessionEnvValuesAreNeverReturned creates a session with a secret in its env: the
// cell sees it, but no description of the session, nor its events, carries it, only
// its name.
func TestSessionEnvValuesAreNeverReturned(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	const secret = "sk-do-not-show-4141"
	resp, data := d.do("POST", "/v1/sessions", map[string]any{"id": "e", "env": map[string]string{"API_KEY": secret}})
	d.want(resp, data, http.StatusCreated, nil)
	if strings.Contains(string(data), secret) || !strings.Contains(string(data), `"API_KEY"`) {
		t.Errorf("POST answered %s; want the name without the value", data)
	}
	if _, rec := d.execute("e", "import os; os.environ['API_KEY'][::-1] == "+strconv.Quote(reverse(secret)), 30000); result(rec) != "True" {
		t.Errorf("the cell sees the secret: %s; want True", result(rec))
	}
	for _, path := range []string{"/v1/sessions", "/v1/sessions/e", "/v1/events?follow=false"} {
		resp, data := d.do("GET", path, nil)
		if resp.StatusCode != http.StatusOK || strings.Contains(string(data), secret) {
			t.Errorf("GET %s: %d, secret shown: %v", path, resp.StatusCode, strings.Contains(string(data), secret))
		}
	}
}

// reverse is s backwards: the secret's check in a cell's source, without the secret.
func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}
