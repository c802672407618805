// Package admission decides whether a host has the memory for one more session: a
// session is admitted while the memory the kernel says is available, less what the
// sessions opening meanwhile and the new one are taken to need, stays above a reserve
// kept for the sessions already open and the rest of the host.
package admission

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
)

// Bounds of admission.
const (
	// SessionBytes is what an opening session is taken to need: an idle session's
	// workbench measures about 8 MiB of proportional set size, and its first cells and
	// a hooks worker started at its first decision grow it.
	SessionBytes = 32 << 20
	// ReserveBytes is the available memory kept free: the open sessions' cells grow
	// into it, and the host's other work keeps it.
	ReserveBytes = 512 << 20
)

// ErrNoMemory is a session refused because the host has not the memory for it.
var ErrNoMemory = errors.New("admission: not enough memory for another session")

// Check says whether a session may open while opening others are still opening, with
// available bytes of memory available: nil, or an error wrapping ErrNoMemory that says
// how much there is and what one needs.
func Check(available int64, opening int) error {
	need := int64(opening+1)*SessionBytes + ReserveBytes
	if available >= need {
		return nil
	}
	return fmt.Errorf("%w: %d MiB available; a session is taken to need %d MiB (%d opening) beyond %d MiB kept free",
		ErrNoMemory, available>>20, SessionBytes>>20, opening+1, ReserveBytes>>20)
}

// Available is the memory the kernel says is available for new work without swapping
// (MemAvailable in /proc/meminfo), in bytes.
func Available() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("admission: %w", err)
	}
	return parseMemAvailable(data)
}

// parseMemAvailable reads MemAvailable, in kB, from the text of /proc/meminfo.
func parseMemAvailable(meminfo []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemAvailable:"))
		if !ok {
			continue
		}
		kb, ok := bytes.CutSuffix(bytes.TrimSpace(rest), []byte(" kB"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(kb)), 10, 64)
		if !ok || err != nil || n < 0 || n > math.MaxInt64>>10 {
			return 0, fmt.Errorf("admission: MemAvailable of %q", rest)
		}
		return n << 10, nil
	}
	return 0, errors.New("admission: no MemAvailable in /proc/meminfo")
}
