package route

import (
	"net/http"
	"testing"
	"time"
)

// TestRetryAfterIsBounded reads waits too large for a Duration: each is MaxRetryAfter,
// never the negative number an overflow gives.
func TestRetryAfterIsBounded(t *testing.T) {
	for _, h := range []http.Header{
		{"Retry-After-Ms": {"1e308"}},
		{"Retry-After-Ms": {"Inf"}},
		{"Retry-After": {"1e300"}},
		{"Retry-After": {"+Inf"}},
	} {
		d, ok := retryAfter(h)
		if !ok || d != MaxRetryAfter {
			t.Errorf("%v: %v, %v; want %v", h, d, ok, MaxRetryAfter)
		}
	}
	if d, ok := retryAfter(http.Header{"Retry-After-Ms": {"250"}}); !ok || d != 250*time.Millisecond {
		t.Errorf("250 ms: %v, %v", d, ok)
	}
}
