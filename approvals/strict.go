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
		eq := types.Equal(l, r)
		if b, ok := eq.(types.Bool); ok && c.Function() == operators.NotEquals {
			return !b
		}
		return eq
	}
	// in: every element of a list, or key of a map, is of l's kind.
	if it, ok := r.(traits.Iterable); ok {
		for i := it.Iterator(); i.HasNext() == types.True; {
			if e := i.Next(); !sameKind(l, e) {
				return types.NewErr("looks for a %s among values that include a %s", kind(l), kind(e))
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

// kind names a value's type, numbers as one.
func kind(v ref.Val) string {
	switch v.Type() {
	case types.IntType, types.UintType, types.DoubleType:
		return "number"
	}
	return fmt.Sprint(v.Type().TypeName())
}
