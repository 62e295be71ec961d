package agent

import "context"

// Usage counts the tokens of model answers, as the server reports them.
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// usageKey keys the *Usage of WithUsage in a context.
type usageKey struct{}

// WithUsage returns a context in which OpenAIModel.Complete adds the token
// counts the server reports (in a stream, with ModelConfig.StreamUsage; a
// server that ignores "stream": true and answers with plain JSON reports
// them anyway) to *u, once per attempt that got them. u must not be read
// until Complete returns.
func WithUsage(ctx context.Context, u *Usage) context.Context {
	return context.WithValue(ctx, usageKey{}, u)
}

// addUsage adds u to the context's Usage, if any.
func addUsage(ctx context.Context, u Usage) {
	if p, ok := ctx.Value(usageKey{}).(*Usage); ok {
		p.InputTokens += u.InputTokens
		p.OutputTokens += u.OutputTokens
	}
}
