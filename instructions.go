package kiln

import (
	"fmt"

	"github.com/kilnrt/kiln/internal/instructions"
)

// ParseInstructionSource reads NAME=PATH, the form of kiln's --instructions flag. NAME
// is 1..128 of [A-Za-z0-9_.-], and none of the names kiln gives its own sources.
func ParseInstructionSource(s string) (InstructionSource, error) {
	n, err := instructions.ParseNamed(s)
	if err != nil {
		return InstructionSource{}, fmt.Errorf("kiln: %w", err)
	}
	return InstructionSource{Name: n.Name, Path: n.Path}, nil
}
