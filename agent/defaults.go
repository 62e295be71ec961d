package agent

import (
	"reflect"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// fillDefaults sets in v, parsed arguments, the default of every property
// that the schema s gives one and v leaves out, in v and in the objects
// and arrays it holds, wherever s says unambiguously which schema
// describes them: a property's (and those of the patternProperties its
// name matches, or else additionalProperties', as a dict[str, Model]
// writes its values'), an array's items' (prefixItems' for the first, or a
// tuple's), a $ref's, each of allOf's, and the one object branch of anyOf
// or oneOf (Optional[Model] in a pydantic schema). A default that its
// property's schema refuses (pydantic writes `label: str = None` as a
// string defaulting to null) is left to the server, which never checks
// it: filled in, it would make every call that leaves the property out
// invalid. A default is copied, never shared with the schema. Every value
// is filled by every schema that describes it, each once (a schema that
// refers to itself, {"$ref": "#"}, describes the same value again and
// again), so the arguments filled do not depend on their size or on the
// order of a map. It reports whether it set any.
func fillDefaults(s *jsonschema.Schema, v any) bool {
	var f filler
	return f.fill(s, v, new(visits))
}

// filler fills one call's arguments: values holds the visits of each
// object and array it holds (by the address of its map or its first
// item), so that one reached from two schemas of its parent (two branches
// of an allOf that both describe a property) is filled by each of its own
// schemas once, not once per way to it, which nesting would multiply.
type filler struct {
	values map[uintptr]*visits
	// visited counts the schemas that filled a value (a test reads it).
	visited int
}

// visitsOf returns the visits of v: an object's or a non-empty array's,
// kept for the whole fill; a fresh one for any other value, which holds
// no values of its own.
func (f *filler) visitsOf(v any) *visits {
	var p uintptr
	switch x := v.(type) {
	case map[string]any:
		p = reflect.ValueOf(x).Pointer()
	case []any:
		if len(x) > 0 {
			p = reflect.ValueOf(x).Pointer()
		}
	}
	if p == 0 {
		return new(visits)
	}
	if f.values == nil {
		f.values = map[uintptr]*visits{}
	}
	vs := f.values[p]
	if vs == nil {
		vs = new(visits)
		f.values[p] = vs
	}
	return vs
}

// visits are the schemas that filled one value: each fills it once, however
// many ways lead to it (a $ref both branches of an allOf take, a property's
// schema and a pattern's), so that the work is bounded by the value's
// schemas, never by the number of ways to them, which nesting multiplies.
type visits struct {
	first *jsonschema.Schema
	more  map[*jsonschema.Schema]bool
}

// add records s and reports whether it was not recorded before.
func (vs *visits) add(s *jsonschema.Schema) bool {
	switch {
	case vs.first == nil:
		vs.first = s
	case vs.first == s || vs.more[s]:
		return false
	case vs.more == nil:
		vs.more = map[*jsonschema.Schema]bool{s: true}
	default:
		vs.more[s] = true
	}
	return true
}

// fill is fillDefaults of s on v, where seen holds the schemas that
// filled v already.
func (f *filler) fill(s *jsonschema.Schema, v any, seen *visits) bool {
	if s == nil || !seen.add(s) {
		return false
	}
	f.visited++
	set := f.fill(s.Ref, v, seen)
	for _, x := range s.AllOf {
		set = f.fill(x, v, seen) || set
	}
	set = f.fill(objectBranch(s.AnyOf), v, seen) || set
	set = f.fill(objectBranch(s.OneOf), v, seen) || set
	switch x := v.(type) {
	case map[string]any:
		for name, val := range x {
			set = f.fillValue(s, name, val) || set
		}
		for name, ps := range s.Properties {
			if _, ok := x[name]; ok {
				continue
			}
			if d, ok := defaultOf(ps); ok && ps.Validate(d) == nil {
				x[name] = copyJSON(d)
				set = true
			}
		}
	case []any:
		for i, e := range x {
			set = f.fill(itemSchema(s, i), e, f.visitsOf(e)) || set
		}
	}
	return set
}

// fillValue fills val, the value of an object's property name, by the
// schemas of s that describe it: its properties' and those of the
// patternProperties it matches, or, with neither, additionalProperties'.
func (f *filler) fillValue(s *jsonschema.Schema, name string, val any) bool {
	set, seen := false, f.visitsOf(val)
	ps, described := s.Properties[name]
	if described {
		set = f.fill(ps, val, seen)
	}
	for re, ps := range s.PatternProperties {
		if re.MatchString(name) {
			described = true
			set = f.fill(ps, val, seen) || set
		}
	}
	if ap, ok := s.AdditionalProperties.(*jsonschema.Schema); ok && !described {
		set = f.fill(ap, val, seen) || set
	}
	return set
}

// itemSchema is the schema of s that describes item i of an array:
// prefixItems' i-th, then items' (2020-12); or a tuple's i-th, then
// additionalItems', or items' (earlier drafts).
func itemSchema(s *jsonschema.Schema, i int) *jsonschema.Schema {
	if i < len(s.PrefixItems) {
		return s.PrefixItems[i]
	}
	if s.Items2020 != nil {
		return s.Items2020
	}
	switch items := s.Items.(type) {
	case *jsonschema.Schema:
		return items
	case []*jsonschema.Schema:
		if i < len(items) {
			return items[i]
		}
		if ai, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
			return ai
		}
	}
	return nil
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
