package kiln

import (
	"errors"
	"fmt"
	"iter"

	"github.com/kilnrt/kiln/internal/lossless"
)

// A Value is a JSON value as JavaScript holds it, what crosses between the host and a
// program: nil (null), Bool, Number, String, Array or Object. No other type implements
// Value. Array, Object and String encode and decode exactly with encoding/json (as
// EncodeValue and DecodeValue do); Bool and Number are plain.
//
// Nothing that handles a Value recurses, so its depth is bounded by memory alone;
// encoding/json itself refuses text nested more than 10,000 deep.
type Value interface{ value() }

// Bool is a JSON true or false.
type Bool bool

// Number is a JSON number, a float64 as in JavaScript.
type Number float64

// String is a JSON string: a JavaScript string, which is UTF-16 and may hold lone
// surrogates, kept as WTF-8 (UTF-8 that also spells a lone surrogate U+D800 to U+DFFF
// as the three bytes of its code point). EncodeValue writes a lone surrogate as its
// escape, \udxxx, so it survives a round trip.
type String string

// Array is a JSON array.
type Array []Value

// Object is a JSON object, its members in the order of JavaScript's Object.keys:
// array-index keys ("0" to "4294967294", canonical decimals) first, ascending, then
// the rest in the order they were first set. The zero Object is empty; NewObject
// makes others.
type Object struct{ members []Member }

// A Member is one key and value of an Object.
type Member struct {
	Key   string // WTF-8, as String
	Value Value
}

func (Bool) value()   {}
func (Number) value() {}
func (String) value() {}
func (Array) value()  {}
func (Object) value() {}

// NewObject returns the object JSON.parse makes of members: ordered as Object.keys
// orders them, and a key given twice keeps its first place and its last value.
func NewObject(members ...Member) Object {
	// The lossless codec orders and merges the keys; each value stands in as its index.
	places := make([]lossless.Member, len(members))
	for i, m := range members {
		places[i] = lossless.Member{Key: m.Key, Value: lossless.Number(i)}
	}
	o := Object{members: make([]Member, 0, len(members))}
	for key, i := range lossless.NewObject(places...).All() {
		o.members = append(o.members, Member{Key: key, Value: members[int(i.(lossless.Number))].Value})
	}
	return o
}

// Len returns the number of members of o.
func (o Object) Len() int { return len(o.members) }

// Get returns the value of o's member key and whether o has one. It scans the
// members, so it takes time in proportion to Len.
func (o Object) Get(key string) (Value, bool) {
	for _, m := range o.members {
		if m.Key == key {
			return m.Value, true
		}
	}
	return nil, false
}

// All yields o's keys and values in order.
func (o Object) All() iter.Seq2[string, Value] {
	return func(yield func(string, Value) bool) {
		for _, m := range o.members {
			if !yield(m.Key, m.Value) {
				return
			}
		}
	}
}

// EncodeValue returns the compact JSON text of v, exact: what JSON.stringify writes,
// except that an integral number has all its digits, so that the other side rebuilds
// the same double. NaN and the infinities are null, −0 is 0, as JSON.stringify has them.
func EncodeValue(v Value) []byte { return lossless.Encode(valueTo(v)) }

// DecodeValue parses data, exactly one JSON text in UTF-8, into the Value JSON.parse
// would make of it, with no limit on its depth.
func DecodeValue(data []byte) (Value, error) {
	v, err := lossless.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("kiln: %w", err)
	}
	return valueFrom(v), nil
}

// MarshalJSON implements json.Marshaler: EncodeValue's text of s.
func (s String) MarshalJSON() ([]byte, error) { return EncodeValue(s), nil }

// MarshalJSON implements json.Marshaler: EncodeValue's text of a.
func (a Array) MarshalJSON() ([]byte, error) { return EncodeValue(a), nil }

// MarshalJSON implements json.Marshaler: EncodeValue's text of o.
func (o Object) MarshalJSON() ([]byte, error) { return EncodeValue(o), nil }

// UnmarshalJSON implements json.Unmarshaler: data must be a JSON string; null leaves s
// as it is, as is encoding/json's convention.
func (s *String) UnmarshalJSON(data []byte) error { return decodeInto(data, s, "a string") }

// UnmarshalJSON implements json.Unmarshaler: data must be a JSON array, or null.
func (a *Array) UnmarshalJSON(data []byte) error { return decodeInto(data, a, "an array") }

// UnmarshalJSON implements json.Unmarshaler: data must be a JSON object, or null.
func (o *Object) UnmarshalJSON(data []byte) error { return decodeInto(data, o, "an object") }

// ErrValueKind is JSON of another kind than the Value it is decoded into: an array
// into an Object, say.
var ErrValueKind = errors.New("kiln: wrong kind of JSON value")

// decodeInto decodes data into *dst, a T, of kind (for the error); null is no change.
func decodeInto[T String | Array | Object](data []byte, dst *T, kind string) error {
	v, err := DecodeValue(data)
	if err != nil || v == nil {
		return err
	}
	t, ok := v.(T)
	if !ok {
		return fmt.Errorf("%w: want %s, got %T", ErrValueKind, kind, v)
	}
	*dst = t
	return nil
}

// The kinds of value rebuild tells apart.
const (
	scalar = iota
	array
	object
)

// valueTo is the lossless value of v.
func valueTo(v Value) lossless.Value {
	return rebuild(v, func(v Value) (lossless.Value, int, []string, []Value) {
		switch v := v.(type) {
		case Bool:
			return lossless.Bool(v), scalar, nil, nil
		case Number:
			return lossless.Number(v), scalar, nil, nil
		case String:
			return lossless.String(v), scalar, nil, nil
		case Array:
			return nil, array, nil, v
		case Object:
			keys, elems := make([]string, len(v.members)), make([]Value, len(v.members))
			for i, m := range v.members {
				keys[i], elems[i] = m.Key, m.Value
			}
			return nil, object, keys, elems
		}
		return nil, scalar, nil, nil
	}, func(kind int, keys []string, elems []lossless.Value) lossless.Value {
		if kind == array {
			if elems == nil {
				return lossless.Array{}
			}
			return lossless.Array(elems)
		}
		members := make([]lossless.Member, len(keys))
		for i, k := range keys {
			members[i] = lossless.Member{Key: k, Value: elems[i]}
		}
		return lossless.NewObject(members...)
	})
}

// valueFrom is the public value of v.
func valueFrom(v lossless.Value) Value {
	return rebuild(v, func(v lossless.Value) (Value, int, []string, []lossless.Value) {
		switch v := v.(type) {
		case lossless.Bool:
			return Bool(v), scalar, nil, nil
		case lossless.Number:
			return Number(v), scalar, nil, nil
		case lossless.String:
			return String(v), scalar, nil, nil
		case lossless.Array:
			return nil, array, nil, v
		case lossless.Object:
			keys, elems := make([]string, 0, v.Len()), make([]lossless.Value, 0, v.Len())
			for k, e := range v.All() {
				keys, elems = append(keys, k), append(elems, e)
			}
			return nil, object, keys, elems
		}
		return nil, scalar, nil, nil
	}, func(kind int, keys []string, elems []Value) Value {
		if kind == array {
			if elems == nil {
				return Array{}
			}
			return Array(elems)
		}
		// The lossless object's members are already ordered, each key once.
		o := Object{members: make([]Member, len(keys))}
		for i, k := range keys {
			o.members[i] = Member{Key: k, Value: elems[i]}
		}
		return o
	})
}

// rebuild converts v, a JSON value in one representation, to another, without
// recursion. split converts a scalar (nil stays nil) or, for an array or an object,
// returns its kind and its elements (and its members' keys); join makes an array or an
// object of its elements converted.
func rebuild[F, T any](v F, split func(F) (T, int, []string, []F), join func(kind int, keys []string, elems []T) T) T {
	type container struct {
		kind  int
		keys  []string
		elems []F
		done  []T
	}
	var stack []container
	for {
		result, kind, keys, elems := split(v)
		if kind != scalar && len(elems) > 0 {
			stack = append(stack, container{kind: kind, keys: keys, elems: elems, done: make([]T, 0, len(elems))})
			v = elems[0]
			continue
		}
		if kind != scalar {
			result = join(kind, keys, nil)
		}
		for {
			if len(stack) == 0 {
				return result
			}
			top := &stack[len(stack)-1]
			top.done = append(top.done, result)
			if len(top.done) < len(top.elems) {
				v = top.elems[len(top.done)]
				break
			}
			result = join(top.kind, top.keys, top.done)
			stack[len(stack)-1] = container{} // let go of what it held
			stack = stack[:len(stack)-1]
		}
	}
}
