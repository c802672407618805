package kiln

import (
	"github.com/kilnrt/kiln/internal/session"
)

// ErrInvalidInput is an input's text that is not 1..admin.MaxSendText characters of
// UTF-8.
var ErrInvalidInput = session.ErrInvalidInput
