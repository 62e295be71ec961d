package approvals

import (
	"fmt"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
)

// strictComparisons makes ==, != and in fail, so that the condition fails
// closed, when they compare values of different kinds, where CEL answers
// false: `args.force == true` with "true" or 1 for force, or `args.env !=
// "prod"` with ["prod"] for env, says nothing about what the tool will do
// with the value. Numbers compare across int, uint and double, as in CEL,
// and anything compares with null.
func strictComparisons() cel.ProgramOption {
	return cel.CustomDecoratorV2(func(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
		call, ok := i.(interpreter.InterpretableCall)
		if !ok {
			return i, nil
		}
		switch call.Function() {
		case operators.Equals, operators.NotEquals, operators.In:
			if args := call.Args(); len(args) == 2 {
				return &strictCall{InterpretableCall: call, lhs: args[0], rhs: args[1]}, nil
			}
		}
		return i, nil
	})
}

// strictCall is ==, != or in, with the kinds of its operands checked.
type strictCall struct {
	interpreter.InterpretableCall
	lhs, rhs interpreter.InterpretableV2
}

// Eval implements interpreter.Interpretable.
func (c *strictCall) Eval(a interpreter.Activation) ref.Val {
	return c.apply(c.lhs.Eval(a), c.rhs.Eval(a))
}

// Exec implements interpreter.InterpretableV2.
func (c *strictCall) Exec(f *interpreter.ExecutionFrame) ref.Val {
	return c.apply(c.lhs.Exec(f), c.rhs.Exec(f))
}

func (c *strictCall) apply(l, r ref.Val) ref.Val {
	if types.IsUnknownOrError(l) {
		return l
	}
	if types.IsUnknownOrError(r) {
		return r
	}
	switch c.Function() {
	case operators.Equals, operators.NotEquals:
		if !sameKind(l, r) {
			return types.NewErr("compares a %s with a %s", kind(l), kind(r))
		}
		if x, y, at, found := deepMismatch(l, r); found {
			return types.NewErr("compares a %s with a %s, at %s", kind(x), kind(y), at)
		}
		eq := types.Equal(l, r)
		if b, ok := eq.(types.Bool); ok && c.Function() == operators.NotEquals {
			return !b
		}
		return eq
	}
	// in: every element of a list, or key of a map, is of l's kind, at
	// every depth.
	if it, ok := r.(traits.Iterable); ok {
		for i := it.Iterator(); i.HasNext() == types.True; {
			e := i.Next()
			if !sameKind(l, e) {
				return types.NewErr("looks for a %s among values that include a %s", kind(l), kind(e))
			}
			if x, y, at, found := deepMismatch(l, e); found {
				return types.NewErr("looks for a %s among values that include a %s, comparing at %s a %s with a %s", kind(l), kind(e), at, kind(x), kind(y))
			}
		}
	}
	cont, ok := r.(traits.Container)
	if !ok {
		return types.NewErr("no such overload: %s in %s", kind(l), kind(r))
	}
	return cont.Contains(l)
}

// sameKind reports whether a and b may be compared: of one type, both
// numbers, or either null.
func sameKind(a, b ref.Val) bool {
	return kind(a) == kind(b) || a.Type() == types.NullType || b.Type() == types.NullType
}

// deepMismatch looks inside a and b, which sameKind accepts, for two values
// at the same place whose kinds differ, as types.Equal would compare them
// by CEL's rules and answer false: ["prod"] and [["prod"]], or {"env":
// "prod"} and {"env": ["prod"]}. It walks lists of the same length and maps
// with the same keys (other lists and maps are unequal whatever their
// elements), and returns the first such pair and where it is in a, as
// [0]["env"]. Scalars cost a type assertion or two.
func deepMismatch(a, b ref.Val) (x, y ref.Val, at string, found bool) {
	switch av := a.(type) {
	case *types.Optional:
		// Optionals (args.?env) compare the values they hold.
		bv, ok := b.(*types.Optional)
		if !ok || !av.HasValue() || !bv.HasValue() {
			return nil, nil, "", false
		}
		ae, be := av.GetValue(), bv.GetValue()
		if !sameKind(ae, be) {
			return ae, be, ".value()", true
		}
		if x, y, at, found := deepMismatch(ae, be); found {
			return x, y, ".value()" + at, true
		}
	case traits.Lister:
		bv, ok := b.(traits.Lister)
		if !ok {
			return nil, nil, "", false
		}
		n, ok := av.Size().(types.Int)
		if !ok || bv.Size() != n {
			return nil, nil, "", false
		}
		for i := types.Int(0); i < n; i++ {
			ae, be := av.Get(i), bv.Get(i)
			if types.IsUnknownOrError(ae) || types.IsUnknownOrError(be) {
				return nil, nil, "", false // types.Equal answers that
			}
			if !sameKind(ae, be) {
				return ae, be, fmt.Sprintf("[%d]", i), true
			}
			if x, y, at, found := deepMismatch(ae, be); found {
				return x, y, fmt.Sprintf("[%d]", i) + at, true
			}
		}
	case traits.Mapper:
		bv, ok := b.(traits.Mapper)
		if !ok || av.Size() != bv.Size() {
			return nil, nil, "", false
		}
		// Walk the keys in the order of a JSON object's, sorted, when
		// either is one, so the pair named does not vary.
		from, other := av, bv
		if _, sorted := a.(sortedMap); !sorted {
			if _, sorted := b.(sortedMap); sorted {
				from, other = bv, av
			}
		}
		for it := from.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			if _, ok := other.Find(k); !ok {
				// Other keys: unequal, unless other's are of another kind
				// ({1: "a"} against JSON's {"1": "a"}).
				if keys := other.Iterator(); keys.HasNext() == types.True {
					if ok := keys.Next(); !sameKind(k, ok) {
						return k, ok, "a key", true
					}
				}
				return nil, nil, "", false
			}
		}
		for it := from.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ae, aok := av.Find(k)
			be, bok := bv.Find(k)
			if !aok || !bok {
				return nil, nil, "", false
			}
			if types.IsUnknownOrError(ae) || types.IsUnknownOrError(be) {
				return nil, nil, "", false
			}
			if !sameKind(ae, be) {
				return ae, be, keyPath(k), true
			}
			if x, y, at, found := deepMismatch(ae, be); found {
				return x, y, keyPath(k) + at, true
			}
		}
	}
	return nil, nil, "", false
}

// keyPath writes a map key as a step of deepMismatch's path: ["env"], [1].
func keyPath(k ref.Val) string {
	if s, ok := k.(types.String); ok {
		return fmt.Sprintf("[%q]", string(s))
	}
	return fmt.Sprintf("[%v]", k.Value())
}

// kind names a value's type, numbers as one.
func kind(v ref.Val) string {
	switch v.Type() {
	case types.IntType, types.UintType, types.DoubleType:
		return "number"
	}
	return fmt.Sprint(v.Type().TypeName())
}
