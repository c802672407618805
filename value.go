package kiln

import (
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"

	"github.com/kilnrt/kiln/internal/lossless"
	"github.com/kilnrt/kiln/internal/textcut"
)

// A Value is a JSON value as JavaScript holds it, what crosses between the host and a
// program: nil (null), Bool, Number, String, Array or Object. A pointer to one of these
// (a *String) implements Value too, as does a type that embeds one, but is none: what
// takes a Value rejects it with ErrNotValue, never reading it as null. Array, Object and String encode and decode exactly with encoding/json (as
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
// Its error is ErrNotValue.
func EncodeValue(v Value) ([]byte, error) {
	lv, err := valueTo(v)
	if err != nil {
		return nil, err
	}
	return lossless.Encode(lv), nil
}

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
func (s String) MarshalJSON() ([]byte, error) { return EncodeValue(s) }

// MarshalJSON implements json.Marshaler: EncodeValue's text of a.
func (a Array) MarshalJSON() ([]byte, error) { return EncodeValue(a) }

// MarshalJSON implements json.Marshaler: EncodeValue's text of o.
func (o Object) MarshalJSON() ([]byte, error) { return EncodeValue(o) }

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

// ErrNotValue is a Value of none of the six kinds: a pointer to one (a *String, say),
// or a type of its own that embeds one. Its error says which type, and where in the
// value it is, as a path from the value ($) through array indexes and member keys.
var ErrNotValue = errors.New("kiln: not a JSON value")

// valueTo is the lossless value of v, or ErrNotValue.
func valueTo(v Value) (lossless.Value, error) {
	var root lossless.Value
	var p pending[Value, Member, lossless.Value, lossless.Member]
	whole := v
	for place := &root; place != nil; v, place = p.next(publicMember) {
		switch v := v.(type) {
		case nil:
		case Bool:
			*place = lossless.Bool(v)
		case Number:
			*place = lossless.Number(v)
		case String:
			*place = lossless.String(v)
		case Array:
			elems := make(lossless.Array, len(v))
			*place = elems
			p.pushArray(v, elems)
		case Object:
			members := make([]lossless.Member, len(v.members))
			for i, m := range v.members {
				members[i].Key = m.Key
			}
			// v's members are ordered already, each key once.
			*place = lossless.Ordered(members)
			p.pushObject(v.members, members)
		default:
			return nil, notValue(whole)
		}
	}
	return root, nil
}

// valueFrom is the public value of v.
func valueFrom(v lossless.Value) Value {
	var root Value
	var p pending[lossless.Value, lossless.Member, Value, Member]
	for place := &root; place != nil; v, place = p.next(losslessMember) {
		switch v := v.(type) {
		case lossless.Bool:
			*place = Bool(v)
		case lossless.Number:
			*place = Number(v)
		case lossless.String:
			*place = String(v)
		case lossless.Array:
			elems := make(Array, len(v))
			*place = elems
			p.pushArray(v, elems)
		case lossless.Object:
			// The lossless object's members are ordered already, each key once.
			src := v.Members()
			members := make([]Member, len(src))
			for i, m := range src {
				members[i].Key = m.Key
			}
			*place = Object{members: members}
			p.pushObject(src, members)
		}
	}
	return root
}

func publicMember(src *Member, dst *lossless.Member) (Value, *lossless.Value) {
	return src.Value, &dst.Value
}

func losslessMember(src *lossless.Member, dst *Member) (lossless.Value, *Value) {
	return src.Value, &dst.Value
}

// pending are the containers a conversion from values V with members M to values W with
// members N has made and not yet filled, innermost last: for each, the elements it has
// yet to convert and their places in the new container. A container leaves as its last
// element is taken, so that a value nested a million deep, each container's element
// its only one, has one container pending at a time.
type pending[V, M, W, N any] struct {
	arrays   []unfilled[V, W]
	objects  []unfilled[M, N]
	isObject []bool // what each pending container is, innermost last
}

// unfilled is a container's elements yet to convert, src, and their places, dst.
type unfilled[S, D any] struct {
	src []S
	dst []D
}

// pushArray makes src, an array's elements, pending, their conversions to go in dst.
func (p *pending[V, M, W, N]) pushArray(src []V, dst []W) {
	if len(src) > 0 {
		p.arrays = append(p.arrays, unfilled[V, W]{src, dst})
		p.isObject = append(p.isObject, false)
	}
}

// pushObject makes src, an object's members, pending, their conversions to go in dst,
// which has their keys.
func (p *pending[V, M, W, N]) pushObject(src []M, dst []N) {
	if len(src) > 0 {
		p.objects = append(p.objects, unfilled[M, N]{src, dst})
		p.isObject = append(p.isObject, true)
	}
}

// next takes the innermost pending container's next element and returns it with its
// place, which member finds for an object's member; nil is no place, nothing pending.
func (p *pending[V, M, W, N]) next(member func(*M, *N) (V, *W)) (V, *W) {
	n := len(p.isObject)
	if n == 0 {
		var none V
		return none, nil
	}
	var v V
	var place *W
	var last bool
	if p.isObject[n-1] {
		var src *M
		var dst *N
		src, dst, last = take(&p.objects)
		v, place = member(src, dst)
	} else {
		var src *V
		src, place, last = take(&p.arrays)
		v = *src
	}
	if last {
		p.isObject = p.isObject[:n-1]
	}
	return v, place
}

// take returns the next element of the innermost of containers and its place, and
// drops the container if that was its last, saying so.
func take[S, D any](containers *[]unfilled[S, D]) (*S, *D, bool) {
	c := &(*containers)[len(*containers)-1]
	src, dst := &c.src[0], &c.dst[0]
	c.src, c.dst = c.src[1:], c.dst[1:]
	if len(c.src) > 0 {
		return src, dst, false
	}
	*c = unfilled[S, D]{}
	*containers = (*containers)[:len(*containers)-1]
	return src, dst, true
}

// notValue is the ErrNotValue of the first thing in v, depth first, that is not a Value
// of one of the six kinds; v has one.
func notValue(v Value) error {
	type step struct {
		elems   Array
		members []Member
		i       int // the element walked now
	}
	var path []step
	for {
		switch v := v.(type) {
		case nil, Bool, Number, String:
		case Array:
			path = append(path, step{elems: v, i: -1})
		case Object:
			path = append(path, step{members: v.members, i: -1})
		default:
			return fmt.Errorf("%w: %T at %s", ErrNotValue, v, formatPath(len(path), func(k int) string {
				if s := path[k]; s.elems == nil {
					return memberStep(s.members[s.i].Key)
				}
				return "[" + strconv.Itoa(path[k].i) + "]"
			}))
		}
		// Move to the next element, leaving the containers walked through.
		for {
			s := &path[len(path)-1]
			if s.i++; s.i < len(s.elems) {
				v = s.elems[s.i]
				break
			}
			if s.i < len(s.members) {
				v = s.members[s.i].Value
				break
			}
			path = path[:len(path)-1]
		}
	}
}

// maxPathSteps is how many steps of a path an error shows: the first and last halves,
// "…" between.
const maxPathSteps = 16

// maxPathKey is how many bytes of a member's key a path shows.
const maxPathKey = 64

// formatPath spells the path of n steps, step(k) the k'th: $, then [3] or .key or
// ["other key"] for each.
func formatPath(n int, step func(k int) string) string {
	var b strings.Builder
	b.WriteString("$")
	for k := 0; k < n; k++ {
		if n > maxPathSteps && k == maxPathSteps/2 {
			fmt.Fprintf(&b, "…(%d steps)…", n-maxPathSteps)
			k = n - maxPathSteps/2
		}
		b.WriteString(step(k))
	}
	return b.String()
}

// memberStep is a path's step to the member key.
func memberStep(key string) string {
	if identifier(key) {
		return "." + textcut.Ellipsis(key, maxPathKey)
	}
	return "[" + strconv.Quote(textcut.Ellipsis(key, maxPathKey)) + "]"
}

// identifier reports whether key is ASCII letters, digits and "_", not starting with a
// digit.
func identifier(key string) bool {
	for i, c := range []byte(key) {
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return key != ""
}
