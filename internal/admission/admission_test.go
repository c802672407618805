package admission

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckAtTheBoundAndOnePast(t *testing.T) {
	for _, opening := range []int{0, 3} {
		at := int64(opening+1)*SessionBytes + ReserveBytes
		if err := Check(at, opening); err != nil {
			t.Errorf("%d opening, at the bound: %v", opening, err)
		}
		err := Check(at-1, opening)
		if !errors.Is(err, ErrNoMemory) || !strings.Contains(err.Error(), "MiB available") {
			t.Errorf("%d opening, one byte short: %v", opening, err)
		}
	}
}

func TestParseMemAvailable(t *testing.T) {
	for text, want := range map[string]int64{
		"MemTotal:       24000000 kB\nMemFree:  1 kB\nMemAvailable:   20000000 kB\n": 20000000 << 10,
		"MemAvailable: 0 kB\n": 0,
	} {
		if got, err := parseMemAvailable([]byte(text)); err != nil || got != want {
			t.Errorf("%q: %d %v; want %d", text, got, err, want)
		}
	}
	for _, bad := range []string{"", "MemFree: 1 kB\n", "MemAvailable: lots\n", "MemAvailable: -1 kB\n", "MemAvailable: 12 MB\n"} {
		if _, err := parseMemAvailable([]byte(bad)); err == nil {
			t.Errorf("%q read", bad)
		}
	}
}

func TestAvailableReadsThisHost(t *testing.T) {
	n, err := Available()
	if err != nil || n <= 0 {
		t.Fatalf("%d %v", n, err)
	}
}

func FuzzParseMemAvailable(f *testing.F) {
	f.Add([]byte("MemAvailable:   20000000 kB\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if n, err := parseMemAvailable(data); err == nil && n < 0 {
			t.Fatalf("negative %d", n)
		}
	})
}
