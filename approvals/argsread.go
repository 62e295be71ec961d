package approvals

import (
	"slices"

	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
)

// ArgsRead returns the names of the call's arguments that the condition
// when reads by name, sorted: args.x, has(args.x), args.?x, args["x"] and
// args[?"x"] (a key computed at run time is not named). A condition that
// does not compile reads none. It is for checks that a rule reads
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
	isArgs := func(e celast.Expr) bool { return e.Kind() == celast.IdentKind && e.AsIdent() == "args" }
	celast.PostOrderVisit(ast.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.SelectKind:
			if s := e.AsSelect(); isArgs(s.Operand()) {
				names = append(names, s.FieldName())
			}
		case celast.CallKind:
			c := e.AsCall()
			switch c.FunctionName() {
			case operators.Index, operators.OptIndex, operators.OptSelect:
			default:
				return
			}
			if args := c.Args(); len(args) == 2 && isArgs(args[0]) && args[1].Kind() == celast.LiteralKind {
				if s, ok := args[1].AsLiteral().(types.String); ok {
					names = append(names, string(s))
				}
			}
		}
	}))
	slices.Sort(names)
	return slices.Compact(names)
}
