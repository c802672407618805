// Package lossless reads and writes JSON exactly as JavaScript's JSON.parse
// and JSON.stringify see it, for the fd-3 channel between kiln and a program
// child, where every inbound frame is hostile.
//
// Nothing here recurses: Decode, Append, Size, Check and Lossy keep their own
// stack, so nesting depth is bounded by memory alone. Numbers are float64, as
// in JavaScript; strings are JavaScript strings, lone surrogates included.
//
// A receiver caps a frame's bytes first, then drops the frame if
// UnsafeInteger finds an integer that a float64 would round, then decodes it.
// Before a value leaves for the other side, Check meters it against a byte
// budget and rejects NaN, the infinities and negative zero.
//
// Encode writes an integral number with all its digits, even past 1e21,
// so that the other side rebuilds the same double; Size and Check count the
// bytes JSON.stringify would write, where such a number is as short as
// 1e+21, as the child measures its completion budget.
package lossless

import (
	"cmp"
	"iter"
	"slices"
	"strings"
)

// A Value is a JSON value as JavaScript holds it: nil (null), Bool, Number,
// String, Array or Object. No other type implements Value.
type Value interface{ value() }

// Bool is a JSON true or false.
type Bool bool

// Number is a JSON number, a float64 as in JavaScript.
type Number float64

// String is a JSON string: a JavaScript string, which is UTF-16 and may hold
// lone surrogates, kept as WTF-8. WTF-8 is UTF-8 that also spells each lone
// surrogate U+D800 to U+DFFF as the three bytes of its code point, ED A0 80 to
// ED BF BF; Decode produces nothing else. Append writes a lone surrogate as
// the escape \udxxx, in lowercase hex as JSON.stringify does, so it survives
// a round trip. Should a String not be WTF-8, Append reads a high surrogate
// spelled right before a low one as the pair they make, and writes any other
// byte that begins no code point as U+FFFD.
type String string

// Array is a JSON array.
type Array []Value

// Object is a JSON object, its members in the order of JavaScript's
// Object.keys: array-index keys first, ascending, then the rest in the order
// they were first set. An array-index key is the canonical decimal spelling of
// an integer from 0 to 2^32−2. The zero Object is empty.
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

// maxIndex is the largest array index, 2^32−2: JavaScript orders keys that
// spell an integer from 0 to maxIndex before all others.
const maxIndex = 1<<32 - 2

// smallObject is the member count up to which objects find keys by scanning.
const smallObject = 16

// NewObject returns the object JSON.parse makes of members: a key set twice
// keeps its first position and takes its last value.
func NewObject(members ...Member) Object {
	return newObject(slices.Clone(members))
}

// newObject is NewObject, working in members' own array.
func newObject(members []Member) Object {
	o := Object{members: members[:0]}
	var index map[string]int // position in o.members by key, for large objects
	if len(members) > smallObject {
		index = make(map[string]int, len(members))
	}
	for _, m := range members {
		if i, ok := o.find(m.Key, index); ok {
			o.members[i].Value = m.Value
			continue
		}
		if index != nil {
			index[m.Key] = len(o.members)
		}
		o.members = append(o.members, m)
	}
	if !slices.IsSortedFunc(o.members, keyOrder) {
		slices.SortStableFunc(o.members, keyOrder)
	}
	return o
}

// Ordered returns the object of members, which must already be as an Object holds
// its own: in Object.keys order, each key once. It takes members' array as its own and
// checks nothing, so that a converter can fill the values in after.
func Ordered(members []Member) Object { return Object{members: members} }

// Members returns o's members in order: o's own array, to read, not to change.
func (o Object) Members() []Member { return o.members }

// Len returns the number of members of o.
func (o Object) Len() int { return len(o.members) }

// Get returns the value of o's member key and whether o has one. It scans
// the members, so it takes time in proportion to Len.
func (o Object) Get(key string) (Value, bool) {
	if i, ok := o.find(key, nil); ok {
		return o.members[i].Value, true
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

// find returns the position of key in o.members, looking it up in index
// unless index is nil.
func (o Object) find(key string, index map[string]int) (int, bool) {
	if index != nil {
		i, ok := index[key]
		return i, ok
	}
	i := slices.IndexFunc(o.members, func(m Member) bool { return m.Key == key })
	return i, i >= 0
}

// keyOrder orders members as Object.keys does: array indexes first, by value,
// the other keys all equal, so that a stable sort keeps their order.
func keyOrder(a, b Member) int {
	switch ai, bi := isIndex(a.Key), isIndex(b.Key); {
	case ai && bi:
		// Canonical decimals compare as numbers by length, then by digits.
		return cmp.Or(cmp.Compare(len(a.Key), len(b.Key)), strings.Compare(a.Key, b.Key))
	case ai:
		return -1
	case bi:
		return 1
	}
	return 0
}

// isIndex reports whether key is an array index: "0", or digits without a
// leading zero spelling an integer up to maxIndex.
func isIndex(key string) bool {
	if key == "0" {
		return true
	}
	if key == "" || len(key) > len("4294967294") || key[0] == '0' {
		return false
	}
	var n uint64
	for _, c := range []byte(key) {
		if !isDigit(c) {
			return false
		}
		n = n*10 + uint64(c-'0')
	}
	return n <= maxIndex
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
