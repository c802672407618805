package worker

import (
	"errors"
	"fmt"
)

// State is where a worker generation stands in its lifecycle.
type State int

// The lifecycle of one generation. Every generation ends Dead; none comes back.
const (
	Starting State = iota // spawned, waiting for hello
	Idle                  // ready for an operation
	Busy                  // one foreground operation is running
	Stopping              // shutdown sent, waiting for the exit
	Dead                  // exited or invalidated
)

var stateNames = [...]string{"starting", "idle", "busy", "stopping", "dead"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Errors of the lifecycle, told apart with errors.Is.
var (
	// ErrIllegalTransition is a lifecycle step the current state does not allow.
	ErrIllegalTransition = errors.New("worker: illegal transition")
	// ErrBusy is a second foreground operation while one runs: a generation runs one at
	// a time.
	ErrBusy = errors.New("worker: an operation is running")
)

// checkState is checkTransition for a generation whose end, if it has ended, had cause.
func checkState(from State, cause error, to State) error {
	if from == Dead {
		return fmt.Errorf("%w: %w", ErrDead, cause)
	}
	return checkTransition(from, to)
}

// checkTransition reports whether from may move to to.
func checkTransition(from, to State) error {
	ok := false
	switch from {
	case Starting:
		ok = to == Idle || to == Dead
	case Idle:
		ok = to == Busy || to == Stopping || to == Dead
	case Busy:
		ok = to == Idle || to == Stopping || to == Dead
	case Stopping:
		ok = to == Dead
	}
	if from == Busy && to == Busy {
		return ErrBusy
	}
	if !ok {
		return fmt.Errorf("%w: %s → %s", ErrIllegalTransition, from, to)
	}
	return nil
}
