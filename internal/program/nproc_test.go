package program

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// statusTasksByLines is the plain reading statusTasks must agree with: every line,
// split as text.
func statusTasksByLines(status string) (real string, threads int) {
	for line := range strings.Lines(status) {
		key, value, _ := strings.Cut(line, ":")
		switch key {
		case "Uid":
			real, _, _ = strings.Cut(strings.TrimSpace(value), "\t")
		case "Threads":
			threads, _ = strconv.Atoi(strings.TrimSpace(value))
		}
	}
	return real, threads
}

func FuzzStatusTasks(f *testing.F) {
	f.Add([]byte("Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\nThreads:\t3\n"))
	f.Add([]byte("Uid: 0\nThreads: x\nThreads:\t2\n"))
	if own, err := os.ReadFile("/proc/self/status"); err == nil {
		f.Add(own)
	}
	f.Fuzz(func(t *testing.T, status []byte) {
		real, threads := statusTasks(status)
		wantReal, wantThreads := statusTasksByLines(string(status))
		if string(real) != wantReal || threads != wantThreads {
			t.Fatalf("%q: %q %d; want %q %d", status, real, threads, wantReal, wantThreads)
		}
	})
}

// TestUserTasksCountsAsThePlainReadingDoes compares userTasks with the plain reading of
// every status file on this host. Processes come and go between the two counts: they
// agree within a few.
func TestUserTasksCountsAsThePlainReadingDoes(t *testing.T) {
	plain := func() int {
		paths, _ := filepath.Glob("/proc/[0-9]*/status")
		n := 0
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			if real, threads := statusTasksByLines(string(data)); real == strconv.Itoa(os.Getuid()) {
				n += threads
			}
		}
		return n
	}
	before := plain()
	got := userTasks(os.Getuid())
	after := plain()
	if got < min(before, after)-16 || got > max(before, after)+16 || got <= 0 {
		t.Fatalf("userTasks %d; the plain reading %d then %d", got, before, after)
	}
	if real, _ := statusTasks(bytes.Repeat([]byte("x"), maxStatusBytes)); real != nil {
		t.Fatalf("a status of no lines has uid %q", real)
	}
}

// BenchmarkUserTasks counts this user's tasks: with three system calls a process
// (userTasks), and with os.ReadFile and a reading by lines, as before.
func BenchmarkUserTasks(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		for b.Loop() {
			userTasks(os.Getuid())
		}
	})
	b.Run("readfile", func(b *testing.B) {
		entries, _ := os.ReadDir("/proc")
		b.ResetTimer()
		for b.Loop() {
			n := 0
			for _, e := range entries {
				data, err := os.ReadFile("/proc/" + e.Name() + "/status")
				if err != nil {
					continue
				}
				if real, threads := statusTasksByLines(string(data)); real == "0" {
					n += threads
				}
			}
		}
	})
}
