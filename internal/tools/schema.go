package tools

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/textcut"
)

// Validate checks value (decoded JSON: nil, bool, float64, string, []any,
// map[string]any) against schema, the subset of JSON Schema that MCP tools' input
// schemas use:
//
//   - type: a name or a list of names of "object", "array", "string", "number",
//     "integer" (a number with no fractional part), "boolean", "null";
//   - properties: the schemas of an object's members, checked where present;
//   - required: the members an object must have;
//   - additionalProperties: false refuses members not in properties; a schema checks them;
//   - items: the schema of every element of an array;
//   - enum: the values allowed, compared as JSON.
//
// Every other keyword (format, minimum, pattern, $ref, anyOf, …) is ignored: the tool
// itself remains the judge of what it accepts. The error names the first mismatch by
// its path, as "arguments.items[2].name".
func Validate(schema, value any) error {
	return validate(schema, value, "arguments")
}

func validate(schema, value any, path string) error {
	s, ok := schema.(map[string]any)
	if !ok {
		return nil // true, or a form of schema outside the subset: accepts anything
	}
	if t, ok := s["type"]; ok {
		if err := checkType(t, value, path); err != nil {
			return err
		}
	}
	if allowed, ok := s["enum"].([]any); ok && !slices.ContainsFunc(allowed, func(a any) bool { return jsonEqual(a, value) }) {
		return fmt.Errorf("%s: %s is not one of %s", path, show(value), show(allowed))
	}
	switch v := value.(type) {
	case map[string]any:
		return checkObject(s, v, path)
	case []any:
		if items, ok := s["items"].(map[string]any); ok {
			for i, item := range v {
				if err := validate(items, item, path+"["+strconv.Itoa(i)+"]"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkObject applies required, properties and additionalProperties to an object.
func checkObject(s map[string]any, v map[string]any, path string) error {
	if required, ok := s["required"].([]any); ok {
		for _, name := range required {
			if n, ok := name.(string); ok {
				if _, present := v[n]; !present {
					return fmt.Errorf("%s: the required member %q is missing", path, n)
				}
			}
		}
	}
	props, _ := s["properties"].(map[string]any)
	extra := s["additionalProperties"]
	for _, name := range sortedKeys(v) { // the first mismatch is the same each time
		member := path + "." + name
		if p, ok := props[name]; ok {
			if err := validate(p, v[name], member); err != nil {
				return err
			}
			continue
		}
		switch x := extra.(type) {
		case bool:
			if !x {
				return fmt.Errorf("%s: unexpected member %q (expected: %s)", path, name, strings.Join(sortedKeys(props), ", "))
			}
		case map[string]any:
			if err := validate(x, v[name], member); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkType applies type, a name or a list of names.
func checkType(t, value any, path string) error {
	var names []string
	switch x := t.(type) {
	case string:
		names = []string{x}
	case []any:
		for _, n := range x {
			if s, ok := n.(string); ok {
				names = append(names, s)
			}
		}
	default:
		return nil
	}
	if len(names) == 0 || slices.ContainsFunc(names, func(n string) bool { return hasType(n, value) }) {
		return nil
	}
	return fmt.Errorf("%s: want %s, got %s", path, strings.Join(names, " or "), typeOf(value))
}

// hasType reports whether value is of the JSON Schema type name; an unknown name
// accepts anything.
func hasType(name string, value any) bool {
	switch name {
	case "object":
		_, ok := value.(map[string]any)
		return ok
	case "array":
		_, ok := value.([]any)
		return ok
	case "string":
		_, ok := value.(string)
		return ok
	case "number":
		_, ok := value.(float64)
		return ok
	case "integer":
		f, ok := value.(float64)
		return ok && f == math.Trunc(f) && !math.IsInf(f, 0)
	case "boolean":
		_, ok := value.(bool)
		return ok
	case "null":
		return value == nil
	}
	return true
}

// typeOf names value's JSON type.
func typeOf(value any) string {
	switch v := value.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if v == math.Trunc(v) {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", value)
}

// jsonEqual compares two decoded JSON values as JSON.
func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a, json.Deterministic(true))
	y, err2 := json.Marshal(b, json.Deterministic(true))
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// show is value as JSON, cut for an error message.
func show(value any) string {
	data, err := json.Marshal(value, json.Deterministic(true))
	if err != nil {
		return fmt.Sprint(value)
	}
	return textcut.Ellipsis(string(data), 200)
}

// sortedKeys are m's keys, sorted.
func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
