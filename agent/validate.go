package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/toolgate/toolgate/store"
)

var printer = message.NewPrinter(language.English)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// argsError is arguments refused before the policy: Error says what is
// wrong in words for the model, Person in words for a person who edited
// them (`replicas must be an integer, got "3"`).
type argsError struct {
	Model  string
	Person string
}

func (e *argsError) Error() string { return e.Model }

// argsProblem is an argsError that reads the same for both.
func argsProblem(format string, v ...any) *argsError {
	s := fmt.Sprintf(format, v...)
	return &argsError{Model: s, Person: s}
}

// personText says what is wrong with refused arguments in words for a
// person: argsError's Person text when err has one, err's text otherwise.
func personText(err error) string {
	var ae *argsError
	if errors.As(err, &ae) {
		return ae.Person
	}
	return err.Error()
}

// parseObject parses arguments that must be one JSON object, for the
// schema check.
func parseObject(args []byte) (any, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return nil, argsProblem("arguments are not valid JSON: %v", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, argsProblem("arguments must be a JSON object")
	}
	return v, nil
}

// validate checks args against the tool (see Registry.Filled) and returns
// them with the schema's defaults filled in.
func (t *registered) validate(args json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 {
		trimmed = []byte("{}")
	}
	v, err := parseObject(trimmed)
	if err != nil {
		return nil, err
	}
	if t.schema != nil {
		if fillDefaults(t.schema, v) {
			// Numbers as written, and strings escaped no more than
			// JSON needs.
			if trimmed, err = store.EncodeJSON(v); err != nil {
				return nil, argsProblem("arguments with the schema's defaults: %v", err)
			}
		}
		if err := t.schema.Validate(v); err != nil {
			var ve *jsonschema.ValidationError
			if errors.As(err, &ve) {
				return nil, &argsError{Model: "arguments do not match the schema: " + schemaMessage(ve), Person: personMessage(ve, v)}
			}
			return nil, argsProblem("arguments do not match the schema: %v", err)
		}
	}
	if t.tool.Check != nil {
		if err := t.tool.Check(trimmed); err != nil {
			return nil, argsProblem("%v", err)
		}
	}
	return trimmed, nil
}

// personMessage words a validation error for a person: each problem names
// the field and, for a wrong type, the value given, as in
// `replicas must be an integer, got "3"`.
func personMessage(ve *jsonschema.ValidationError, doc any) string {
	var lines []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		field := strings.Join(e.InstanceLocation, ".")
		switch k := e.ErrorKind.(type) {
		case *kind.Type:
			got := "a " + k.Got
			if val, ok := lookup(doc, e.InstanceLocation); ok {
				if b, err := json.Marshal(val); err == nil {
					got = string(b)
					if len(got) > maxShownValue {
						got = truncateUTF8(got, maxShownValue) + "…"
					}
				}
			}
			lines = append(lines, fmt.Sprintf("%s must be %s, got %s", fieldName(field), typeWords(k.Want), got))
		case *kind.Required:
			for _, m := range k.Missing {
				lines = append(lines, fmt.Sprintf("%s is required", fieldName(join(field, m))))
			}
		case *kind.AdditionalProperties:
			for _, p := range k.Properties {
				lines = append(lines, fmt.Sprintf("%s is not a field of this tool", fieldName(join(field, p))))
			}
		default:
			lines = append(lines, fmt.Sprintf("%s: %s", fieldName(field), e.ErrorKind.LocalizedString(printer)))
		}
	}
	walk(ve)
	return problemList(lines)
}

// maxProblems is how many of a validation's problems are told, and
// maxShownValue how much of a wrong value: arguments can break a schema
// thousands of times over, or with a value of megabytes.
const (
	maxProblems   = 10
	maxShownValue = 80
)

// problemList joins the first maxProblems problems, saying how many more
// there were.
func problemList(lines []string) string {
	if len(lines) > maxProblems {
		more := len(lines) - maxProblems
		lines = append(lines[:maxProblems:maxProblems], fmt.Sprintf("and %d more", more))
	}
	return strings.Join(lines, "; ")
}

// join appends a key to a dotted field path.
func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

// fieldName names a dotted field path, or the arguments as a whole.
func fieldName(field string) string {
	if field == "" {
		return "the arguments"
	}
	return field
}

// typeWords says a list of JSON Schema types in words: "an integer",
// "a string or null".
func typeWords(types []string) string {
	words := make([]string, len(types))
	for i, t := range types {
		switch t {
		case "integer", "object", "array":
			words[i] = "an " + t
		case "null":
			words[i] = "null"
		default:
			words[i] = "a " + t
		}
	}
	return strings.Join(words, " or ")
}

// lookup finds the value at a JSON pointer's tokens in a parsed document.
func lookup(doc any, path []string) (any, bool) {
	for _, tok := range path {
		switch d := doc.(type) {
		case map[string]any:
			v, ok := d[tok]
			if !ok {
				return nil, false
			}
			doc = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(d) {
				return nil, false
			}
			doc = d[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

// schemaMessage flattens a validation error into "at /path: message" lines.
func schemaMessage(ve *jsonschema.ValidationError) string {
	var lines []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := "/" + strings.Join(e.InstanceLocation, "/")
			lines = append(lines, fmt.Sprintf("at %s: %s", loc, e.ErrorKind.LocalizedString(printer)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return problemList(lines)
}
