package agent

import (
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// maxDefaultSteps bounds how many schemas fillDefaults visits for one
// call: a schema that refers to itself ({"$ref": "#"}) describes the
// same value again and again.
const maxDefaultSteps = 10000

// fillDefaults sets in v, parsed arguments, the default of every property
// that the schema s gives one and v leaves out, in v and in the objects
// and arrays it holds, wherever s says unambiguously which schema
// describes them: a property's, an array's items', a $ref's, each of
// allOf's, and the one object branch of anyOf or oneOf (Optional[Model]
// in a pydantic schema). A default that its property's schema refuses
// (pydantic writes `label: str = None` as a string defaulting to null) is
// left to the server, which never checks it: filled in, it would make
// every call that leaves the property out invalid. A default is copied,
// never shared with the schema. It reports whether it set any.
func fillDefaults(s *jsonschema.Schema, v any) bool {
	steps := maxDefaultSteps
	return fill(s, v, &steps)
}

// fill is fillDefaults, counting the schemas it visits down in *steps.
func fill(s *jsonschema.Schema, v any, steps *int) bool {
	if s == nil || *steps <= 0 {
		return false
	}
	*steps--
	set := false
	also := append([]*jsonschema.Schema{s.Ref}, s.AllOf...)
	also = append(also, objectBranch(s.AnyOf), objectBranch(s.OneOf))
	for _, x := range also {
		set = fill(x, v, steps) || set
	}
	switch x := v.(type) {
	case map[string]any:
		for name, ps := range s.Properties {
			if val, ok := x[name]; ok {
				set = fill(ps, val, steps) || set
			} else if d, ok := defaultOf(ps); ok && ps.Validate(d) == nil {
				x[name] = copyJSON(d)
				set = true
			}
		}
	case []any:
		items := s.Items2020
		if is, ok := s.Items.(*jsonschema.Schema); ok {
			items = is
		}
		for _, e := range x {
			set = fill(items, e, steps) || set
		}
	}
	return set
}

// defaultOf returns the default a property's schema gives, its own or,
// beside a bare $ref, the referred schema's.
func defaultOf(s *jsonschema.Schema) (any, bool) {
	for range 8 {
		if s == nil {
			return nil, false
		}
		if s.Default != nil {
			return *s.Default, true
		}
		s = s.Ref
	}
	return nil, false
}

// objectBranch returns the one schema among branches that describes an
// object (its type is object, or it lists properties), or nil when none
// or several do: with several, which one a value meets is the server's
// choice.
func objectBranch(branches []*jsonschema.Schema) *jsonschema.Schema {
	var found *jsonschema.Schema
	for _, b := range branches {
		for b != nil && b.Ref != nil && b.Properties == nil {
			b = b.Ref
		}
		if b == nil || !describesObject(b) {
			continue
		}
		if found != nil {
			return nil
		}
		found = b
	}
	return found
}

// describesObject reports whether s is an object's schema.
func describesObject(s *jsonschema.Schema) bool {
	if s.Properties != nil {
		return true
	}
	if s.Types == nil {
		return false
	}
	for _, t := range s.Types.ToStrings() {
		if t == "object" {
			return true
		}
	}
	return false
}

// copyJSON returns a deep copy of a parsed JSON value.
func copyJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = copyJSON(e)
		}
		return m
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = copyJSON(e)
		}
		return a
	}
	return v
}
