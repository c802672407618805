package lossless

import (
	"errors"
	"fmt"
)

// String, Array and Object implement json.Marshaler and json.Unmarshaler with Encode
// and Decode, so that encoding/json (and any encoder that honours those interfaces)
// carries them exactly: an object's members in their order, a lone surrogate as its
// escape, an integral number with all its digits. Bool and Number need no methods.

// MarshalJSON implements json.Marshaler: Encode's text of s.
func (s String) MarshalJSON() ([]byte, error) { return Encode(s), nil }

// MarshalJSON implements json.Marshaler: Encode's text of a.
func (a Array) MarshalJSON() ([]byte, error) { return Encode(a), nil }

// MarshalJSON implements json.Marshaler: Encode's text of o.
func (o Object) MarshalJSON() ([]byte, error) { return Encode(o), nil }

// UnmarshalJSON implements json.Unmarshaler: data must be a JSON string; null leaves s
// as it is, as encoding/json's convention has it.
func (s *String) UnmarshalJSON(data []byte) error { return decodeInto(data, s, "a string") }

// UnmarshalJSON implements json.Unmarshaler: data must be a JSON array, or null.
func (a *Array) UnmarshalJSON(data []byte) error { return decodeInto(data, a, "an array") }

// UnmarshalJSON implements json.Unmarshaler: data must be a JSON object, or null.
func (o *Object) UnmarshalJSON(data []byte) error { return decodeInto(data, o, "an object") }

// errNotKind is the error of a JSON value of another kind than its Go destination.
var errNotKind = errors.New("lossless: wrong kind of JSON value")

// decodeInto decodes data into *dst, a T of kind (for the error); null is no change.
func decodeInto[T String | Array | Object](data []byte, dst *T, kind string) error {
	v, err := Decode(data)
	if err != nil {
		return err
	}
	if v == nil {
		return nil
	}
	t, ok := v.(T)
	if !ok {
		return fmt.Errorf("%w: want %s, got %T", errNotKind, kind, v)
	}
	*dst = t
	return nil
}
