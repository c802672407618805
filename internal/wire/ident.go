package wire

// MaxIdentifierLen is the longest identifier the protocol accepts.
const MaxIdentifierLen = 128

// ValidIdentifier reports whether s is 1..128 ASCII letters, digits, '_', '.' or '-'.
func ValidIdentifier(s string) bool {
	if len(s) == 0 || len(s) > MaxIdentifierLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}
