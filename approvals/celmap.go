package approvals

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// sortedAdapter is the CEL adapter of the policy's environment: JSON
// objects become maps whose keys are iterated in sorted order. CEL's own
// maps of Go maps iterate in Go's random map order, so a condition over
// args.map(k, ...)[0], or an exists() whose cost depends on which key it
// tries first, could give the same arguments different verdicts.
type sortedAdapter struct{ types.Adapter }

// NativeToValue converts a value of parsed arguments (see argsValue).
func (a sortedAdapter) NativeToValue(v any) ref.Val {
	switch v := v.(type) {
	case map[string]any:
		return sortedMap{Mapper: types.NewStringInterfaceMap(a, v), raw: v, keys: slices.Sorted(maps.Keys(v))}
	case []any:
		return types.NewDynamicList(a, v)
	}
	return a.Adapter.NativeToValue(v)
}

// sortedMap is a CEL map of a JSON object that iterates and folds its keys
// in sorted order.
type sortedMap struct {
	traits.Mapper
	raw  map[string]any
	keys []string
}

// IsZeroValue implements traits.Zeroer, as CEL's own maps do
// (optional.ofNonZeroValue).
func (m sortedMap) IsZeroValue() bool { return len(m.keys) == 0 }

// Iterator implements traits.Iterable.
func (m sortedMap) Iterator() traits.Iterator { return &keyIterator{keys: m.keys} }

// Fold implements traits.Foldable.
func (m sortedMap) Fold(f traits.Folder) {
	for _, k := range m.keys {
		if !f.FoldEntry(k, m.raw[k]) {
			return
		}
	}
}

// keyIterator iterates a sortedMap's keys.
type keyIterator struct {
	keys []string
	next int
}

func (it *keyIterator) HasNext() ref.Val { return types.Bool(it.next < len(it.keys)) }

func (it *keyIterator) Next() ref.Val {
	if it.next >= len(it.keys) {
		return nil
	}
	it.next++
	return types.String(it.keys[it.next-1])
}

func (*keyIterator) ConvertToNative(reflect.Type) (any, error) {
	return nil, fmt.Errorf("type conversion on iterators not supported")
}
func (*keyIterator) ConvertToType(ref.Type) ref.Val { return types.NewErr("no such overload") }
func (*keyIterator) Equal(ref.Val) ref.Val          { return types.NewErr("no such overload") }
func (*keyIterator) Type() ref.Type                 { return types.IteratorType }
func (*keyIterator) Value() any                     { return nil }
