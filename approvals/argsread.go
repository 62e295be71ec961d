package approvals

import (
	"slices"

	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
)

// ArgsRead returns the names of the call's arguments that the condition
// when reads by name, sorted: args.x, has(args.x), args.?x, args["x"],
// args[?"x"] and "x" in args (a key computed at run time is not named). A
// condition that does not compile, or that names a variable of its own
// args (args.l.exists(args, …)), reads none that can be told. It is for checks that a rule reads
// arguments its tools take (a typo in a deny's has(args.pth) would never
// match).
func ArgsRead(when string) []string {
	if when == "" {
		return nil
	}
	env, err := newEnv()
	if err != nil {
		return nil
	}
	ast, iss := env.Compile(when)
	if iss.Err() != nil {
		return nil
	}
	var names []string
	shadowed := false
	isArgs := func(e celast.Expr) bool { return e.Kind() == celast.IdentKind && e.AsIdent() == "args" }
	literal := func(e celast.Expr) (string, bool) {
		if e.Kind() != celast.LiteralKind {
			return "", false
		}
		s, ok := e.AsLiteral().(types.String)
		return string(s), ok
	}
	celast.PostOrderVisit(ast.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.ComprehensionKind:
			if c := e.AsComprehension(); c.IterVar() == "args" || c.HasIterVar2() && c.IterVar2() == "args" || c.AccuVar() == "args" {
				shadowed = true
			}
		case celast.SelectKind:
			if s := e.AsSelect(); isArgs(s.Operand()) {
				names = append(names, s.FieldName())
			}
		case celast.CallKind:
			c := e.AsCall()
			args := c.Args()
			if len(args) != 2 {
				return
			}
			switch c.FunctionName() {
			case operators.Index, operators.OptIndex, operators.OptSelect:
				if name, ok := literal(args[1]); ok && isArgs(args[0]) {
					names = append(names, name)
				}
			case operators.In:
				if name, ok := literal(args[0]); ok && isArgs(args[1]) {
					names = append(names, name)
				}
			}
		}
	}))
	if shadowed {
		return nil
	}
	slices.Sort(names)
	return slices.Compact(names)
}
