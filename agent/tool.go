package agent

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/approvals"
)

// Result is what a tool returns to the model. IsError marks a failure the
// model should read and may recover from (a bad path, a non-zero exit).
type Result struct {
	Content string `json:"content"`
	IsError bool   `json:"is_error,omitempty"`
	// interrupted marks the result of a call the bot stopped while it
	// ran (see interruptedResult): its outcome is unknown, not an error.
	interrupted bool
	// unknown marks the result of a call that may have done its work
	// whose outcome is not known: cut by its time-out (see
	// Agent.execute), or said so by its tool (see UnknownOutcomeResult).
	// It is audited as of unknown outcome, not as an error.
	unknown bool
	// notSent marks the result of a call its tool did not send (see
	// NotSentResult).
	notSent bool
}

// Interrupted reports whether r is the result of a call the bot stopped
// while it ran (a crash, a shutdown, a lost lease): whether the tool did
// its work is not known. Such a result has IsError set, for the model, but
// is not the tool's failure.
func (r Result) Interrupted() bool { return r.interrupted }

// OutcomeUnknown reports whether r is the result of a call that may have
// done its work, or part of it, and whose outcome is not known: one its
// time-out cut (of a tool neither read-only nor idempotent), or one its
// tool said so of (see UnknownOutcomeResult).
func (r Result) OutcomeUnknown() bool { return r.unknown }

// NotSent reports whether r is the result of a call its tool did not
// send, so that it did nothing (see NotSentResult).
func (r Result) NotSent() bool { return r.notSent }

// NotSentResult is the result of a call its tool refused to send, so that
// it did nothing (an MCP server that is not connected, or that listed its
// tools otherwise since the call was checked): content tells the model
// why, and the call is audited, and shown on its card, as not sent, not as
// run with an error.
func NotSentResult(content string) Result {
	return Result{Content: content, IsError: true, notSent: true}
}

// UnknownOutcomeResult is the result of a call that may have done its
// work but whose tool cannot tell whether it did (a request sent whose
// answer never came whole, a program its own time-out killed): content,
// which should end with UnknownOutcome, tells the model so, and the call
// is audited, and shown on its card, as of unknown outcome, not as a
// failure.
func UnknownOutcomeResult(content string) Result {
	return Result{Content: content, IsError: true, unknown: true}
}

// Handler runs a tool with arguments that are valid JSON and passed the
// tool's schema. A returned error becomes an error Result for the model.
type Handler func(ctx context.Context, args json.RawMessage) (Result, error)

// Tool is a function the model may call.
type Tool struct {
	// Name follows OpenAI's function-name rules: 1-64 of [A-Za-z0-9_-].
	Name        string
	Description string
	// Schema is the JSON Schema of the arguments (an object schema). Empty
	// means any JSON object.
	Schema json.RawMessage
	// Annotations are the MCP-style hints a policy falls back on.
	Annotations approvals.Hints
	// Human marks a tool answered by a person (ask_human): when paused, a
	// Respond decision gives its result and nothing runs.
	Human   bool
	Handler Handler
	// Preview, if set, says what a call with these arguments would do
	// (a diff, the request to be sent), without doing it. It is called
	// when a call of the tool pauses for approval, within
	// Config.PreviewTimeout; its text, or its error, is stored with the
	// call and shown on the card.
	Preview PreviewFunc
	// Check, if set, refuses arguments that are valid for the schema but
	// that the handler could not run as they read (two header names that
	// are one header, say): its error is given to the model, as the
	// schema's are, before the policy or a card sees the call.
	Check func(args json.RawMessage) error
	// Origin is where the tool's calls go, as configured: for an MCP
	// tool, its server's name and command or URL. It is part of the
	// tool's definition (see definitionDigest), so that a name that comes
	// to stand for another server's tool runs no call approved before.
	Origin string
}

// definitionDigest is the digest of what t is: its name, hints, whether a
// person answers it, and its origin, with, for a tool of an origin (an MCP
// server's), its description. A call approved runs only on the tool it
// was asked of (see settle): the same name with another meaning (a
// server's description that says it now skips the canaries, hints that
// now call it destructive, another server behind it) runs nothing
// approved before. The description of a tool of no origin (a built-in)
// is the bot's, written from its settings (the hosts, programs or sizes
// allowed), which change nothing of what an approved call does: left
// out, as the schema is, against which the approved arguments are checked
// as it is then (see changedArgs), so that one which still takes them as
// they were (an optional property added) runs them.
func definitionDigest(t Tool) string {
	h := sha256.New()
	hints, _ := json.Marshal(t.Annotations)
	desc := ""
	if t.Origin != "" {
		desc = t.Description
	}
	for _, part := range [][]byte{[]byte(t.Name), []byte(desc), hints, []byte(strconv.FormatBool(t.Human)), []byte(t.Origin)} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// PreviewFunc tells what a call would do with args, which are valid for
// the tool's schema, without side effects.
type PreviewFunc func(ctx context.Context, args json.RawMessage) (string, error)

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidName reports whether name is a valid OpenAI function name.
func ValidName(name string) bool { return validName.MatchString(name) }

// Registry holds the tools the model may call. It is safe for concurrent use;
// tools may be added and removed while turns run (MCP servers come and go).
type Registry struct {
	mu    sync.RWMutex
	tools map[string]*registered
	// changed, if set, is called after each change of tools (see
	// OnChange).
	changed func()
}

type registered struct {
	tool   Tool
	schema *jsonschema.Schema
	// params is the schema as the model gets it (see modelParams).
	params json.RawMessage
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{tools: map[string]*registered{}} }

// Register adds a tool. It fails if the name is invalid or taken, the
// handler is missing, or the schema does not compile.
func (r *Registry) Register(t Tool) error {
	reg, err := compileTool(t)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if _, ok := r.tools[t.Name]; ok {
		r.mu.Unlock()
		return fmt.Errorf("register tool %q: name already registered", t.Name)
	}
	r.tools[t.Name] = reg
	changed := r.changed
	r.mu.Unlock()
	if changed != nil {
		changed()
	}
	return nil
}

// OnChange sets f to be called after each change of the tools (a Register
// or a Replace that succeeded, as when an MCP server connects or its tool
// list changes), outside the registry's lock; nil stops the calls. The
// calls of changes made at once may overlap and come in any order: f
// reads the registry for what it holds.
func (r *Registry) OnChange(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changed = f
}

// Replace atomically removes every tool whose name satisfies drop and
// registers tools instead (used when an MCP server's tool list changes). On
// error nothing changes.
func (r *Registry) Replace(drop func(name string) bool, tools []Tool) error {
	regs := make([]*registered, 0, len(tools))
	for _, t := range tools {
		reg, err := compileTool(t)
		if err != nil {
			return err
		}
		regs = append(regs, reg)
	}
	r.mu.Lock()
	next := make(map[string]*registered, len(r.tools)+len(regs))
	for n, t := range r.tools {
		if !drop(n) {
			next[n] = t
		}
	}
	for _, reg := range regs {
		if _, ok := next[reg.tool.Name]; ok {
			r.mu.Unlock()
			return fmt.Errorf("register tool %q: name already registered", reg.tool.Name)
		}
		next[reg.tool.Name] = reg
	}
	r.tools = next
	changed := r.changed
	r.mu.Unlock()
	if changed != nil {
		changed()
	}
	return nil
}

// Lookup returns the tool named name.
func (r *Registry) Lookup(name string) (Tool, bool) {
	t, ok := r.lookup(name)
	if !ok {
		return Tool{}, false
	}
	return t.tool, true
}

// lookup returns the registration of the tool named name: its tool and
// the schema its arguments are checked with, of one registration, which a
// Replace never changes.
func (r *Registry) lookup(name string) (*registered, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tools[name]
	return t, ok
}

// List returns every tool, sorted by name.
func (r *Registry) List() []Tool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Tool, 0, len(r.tools))
	for _, t := range r.tools {
		out = append(out, t.tool)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// modelTools returns every tool as the model gets it, sorted by name.
func (r *Registry) modelTools() []openai.Tool {
	r.mu.RLock()
	out := make([]openai.Tool, 0, len(r.tools))
	for _, t := range r.tools {
		out = append(out, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: t.tool.Name, Description: t.tool.Description, Parameters: t.params,
		}})
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Function.Name < out[j].Function.Name })
	return out
}

// modelParams is a tool's schema as the model gets it: OpenAI refuses a
// request (every request, whatever tool it needs) whose tools have an
// object schema without properties or an array schema without items, which
// many MCP servers send, so each such schema gets empty ones, which allow
// what their absence allows. The schema the arguments are checked with is
// the tool's own. No schema is an object of any properties.
func modelParams(schema json.RawMessage) json.RawMessage {
	if len(schema) == 0 {
		return json.RawMessage(`{"type":"object","properties":{}}`)
	}
	dec := json.NewDecoder(bytesReader(schema))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil || !completeSchema(doc, 0) {
		return schema
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return schema
	}
	return b
}

// completeSchema adds the properties and items modelParams adds to the
// schema s and the schemas within it, reporting whether it changed any.
func completeSchema(s any, depth int) bool {
	m, ok := s.(map[string]any)
	if !ok || depth > maxArgDepth {
		return false
	}
	changed := false
	if hasType(m, "object") && m["properties"] == nil {
		m["properties"], changed = map[string]any{}, true
	}
	if hasType(m, "array") && m["items"] == nil {
		m["items"], changed = map[string]any{}, true
	}
	for k, v := range m {
		switch k {
		case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas":
			if sub, ok := v.(map[string]any); ok {
				for _, x := range sub {
					changed = completeSchema(x, depth+1) || changed
				}
			}
		case "items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else", "unevaluatedItems", "unevaluatedProperties":
			changed = completeSchema(v, depth+1) || changed
		case "anyOf", "oneOf", "allOf", "prefixItems":
			if list, ok := v.([]any); ok {
				for _, x := range list {
					changed = completeSchema(x, depth+1) || changed
				}
			}
		}
	}
	return changed
}

// hasType reports whether the schema m says its type is t, alone or among
// others.
func hasType(m map[string]any, t string) bool {
	switch v := m["type"].(type) {
	case string:
		return v == t
	case []any:
		for _, x := range v {
			if x == t {
				return true
			}
		}
	}
	return false
}

// Validate checks args against the named tool: they must be a JSON object
// that passes the tool's schema once its defaults are filled in (see
// Filled). The error says exactly what is wrong, in words meant for the
// model.
func (r *Registry) Validate(name string, args json.RawMessage) error {
	_, err := r.Filled(name, args)
	return err
}

// Filled returns args, checked as Validate checks them, with the default
// of every property the tool's schema gives one that args leave out (see
// fillDefaults): what the tool runs with, since a server applies them
// (the MCP Go SDK's, FastMCP's and zod's validation do), so it is what
// the policy judges and an approver sees. Without a default to fill, args
// are returned as they are.
func (r *Registry) Filled(name string, args json.RawMessage) (json.RawMessage, error) {
	r.mu.RLock()
	t, ok := r.tools[name]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown tool %q", name)
	}
	return t.validate(args)
}

// lenientRegexp compiles a schema's pattern with Go's regexp and, where it
// cannot, matches everything: JSON Schema's patterns are ECMA-262's, whose
// lookaheads and backreferences (as Zod writes for an email) Go's regexp
// lacks, and a server's valid schema cost it the whole tool. Such a
// pattern is left to the server to check.
func lenientRegexp(s string) (jsonschema.Regexp, error) {
	if re, err := regexp.Compile(s); err == nil {
		return re, nil
	}
	return uncheckedPattern(s), nil
}

// uncheckedPattern is a pattern Go's regexp cannot compile: it matches
// everything.
type uncheckedPattern string

func (p uncheckedPattern) String() string        { return string(p) }
func (uncheckedPattern) MatchString(string) bool { return true }

// openUncheckedPatternProperties makes, in the schema doc (decoded JSON),
// the subschema of every patternProperties entry whose pattern Go's
// regexp cannot compile one that checks nothing: its pattern matches
// everything (see lenientRegexp), so its subschema would apply to every
// property and refuse valid arguments. The properties it was for are left
// to the server to check, as its pattern is; matched, they are not
// refused by an additionalProperties or unevaluatedProperties either.
func openUncheckedPatternProperties(doc any) {
	switch v := doc.(type) {
	case map[string]any:
		if pp, ok := v["patternProperties"].(map[string]any); ok {
			for pattern := range pp {
				if _, err := regexp.Compile(pattern); err != nil {
					pp[pattern] = true
				}
			}
		}
		for k, sub := range v {
			switch k {
			case "enum", "const", "default", "examples":
				// Values, not schemas.
			default:
				openUncheckedPatternProperties(sub)
			}
		}
	case []any:
		for _, sub := range v {
			openUncheckedPatternProperties(sub)
		}
	}
}

func compileTool(t Tool) (*registered, error) {
	if !ValidName(t.Name) {
		return nil, fmt.Errorf("register tool %q: name must be 1-64 characters of A-Z a-z 0-9 _ -", t.Name)
	}
	if t.Handler == nil && !t.Human {
		return nil, fmt.Errorf("register tool %q: no handler", t.Name)
	}
	reg := &registered{tool: t, params: modelParams(t.Schema)}
	if len(t.Schema) > 0 {
		doc, err := jsonschema.UnmarshalJSON(bytesReader(t.Schema))
		if err != nil {
			return nil, fmt.Errorf("register tool %q: schema is not JSON: %w", t.Name, err)
		}
		openUncheckedPatternProperties(doc)
		c := jsonschema.NewCompiler()
		// A schema comes from an MCP server, which may be remote: its
		// $refs reach nothing outside it (the default loader reads
		// file:// URLs, which would hand the server the bot's files
		// through validation errors). Metaschemas are built in.
		c.UseLoader(jsonschema.SchemeURLLoader{})
		c.UseRegexpEngine(lenientRegexp)
		url := "tool:///" + t.Name + ".json"
		if err := c.AddResource(url, doc); err != nil {
			return nil, fmt.Errorf("register tool %q: schema: %w", t.Name, err)
		}
		s, err := c.Compile(url)
		if err != nil {
			return nil, fmt.Errorf("register tool %q: schema: %w", t.Name, err)
		}
		reg.schema = s
	}
	return reg, nil
}
