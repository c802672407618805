package wire

import (
	"bytes"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// The functions here walk JSON text that has already been validated as a whole (strict
// syntax, UTF-8, no duplicate names), so they only find boundaries and never judge.

// member is one name and value of an object, the value as raw text.
type member struct {
	name  string
	value jsontext.Value
}

// objectMembers splits a valid JSON object into its members, in order.
func objectMembers(v []byte) []member {
	out := make([]member, 0, 8)
	i := skipSpace(v, 1)
	for i < len(v) && v[i] != '}' {
		end := stringEnd(v, i)
		name := unquote(v[i:end])
		i = skipSpace(v, end)
		i = skipSpace(v, i+1) // the colon
		vend := valueEnd(v, i)
		out = append(out, member{name, v[i:vend]})
		i = skipSpace(v, vend)
		if i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
	return out
}

// arrayItems splits a valid JSON array into its items.
func arrayItems(v []byte) []jsontext.Value {
	out := make([]jsontext.Value, 0, 4)
	i := skipSpace(v, 1)
	for i < len(v) && v[i] != ']' {
		end := valueEnd(v, i)
		out = append(out, v[i:end])
		i = skipSpace(v, end)
		if i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
	return out
}

// valueEnd returns the index just past the value that starts at v[i].
func valueEnd(v []byte, i int) int {
	switch v[i] {
	case '"':
		return stringEnd(v, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(v); j++ {
			switch v[j] {
			case '"':
				j = stringEnd(v, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(v)
	}
	j := i
	for j < len(v) && !bytes.ContainsRune([]byte(",]} \t\r\n"), rune(v[j])) {
		j++
	}
	return j
}

// stringEnd returns the index just past the string that starts at v[i].
func stringEnd(v []byte, i int) int {
	for j := i + 1; j < len(v); j++ {
		switch v[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(v)
}

func skipSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\r' || v[i] == '\n') {
		i++
	}
	return i
}

// unquote decodes a valid JSON string.
func unquote(s []byte) string {
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s[1 : len(s)-1])
	}
	var out string
	json.Unmarshal(s, &out) // valid already; cannot fail
	return out
}
