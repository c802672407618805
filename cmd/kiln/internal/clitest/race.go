//go:build race

package clitest

// race says whether this binary has the race detector: the kiln it builds has it too.
const race = true
