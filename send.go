package kiln

import (
	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/session"
)

// ErrInvalidInput is an input's text that is not 1..MaxSendText characters of UTF-8.
var ErrInvalidInput = session.ErrInvalidInput

// ValidSendText checks text against the bound of an operator input and of the agent's
// own local.send: valid UTF-8, 1..MaxSendText characters. An error is ErrInvalidInput,
// saying which part of the rule the text breaks.
func ValidSendText(text string) error {
	return session.ValidSendText(text)
}

// MaxSendText bounds the text of one local.send, and of one operator input, in
// characters.
const MaxSendText = policy.MaxSendText
