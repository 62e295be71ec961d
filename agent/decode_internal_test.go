package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fastjson"
	"github.com/toolgate/toolgate/store"
)

// BenchmarkDecodeRunState decodes the state of a run paused after ten
// exchanges with tool output (about 35 KB), as a resume does before its
// first call runs: as it was, the client's messages decoded by
// encoding/json, and as it is, a history decoded by fastjson.
func BenchmarkDecodeRunState(b *testing.B) {
	data, err := json.Marshal(benchRunState())
	if err != nil {
		b.Fatal(err)
	}
	// Before history: the client's messages, decoded by encoding/json.
	type clientState struct {
		Messages []openai.ChatCompletionMessage `json:"messages"`
		Slots    []slot                         `json:"slots"`
		User     string                         `json:"user"`
		Channel  string                         `json:"channel"`
		Steps    int                            `json:"steps"`
	}
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			var got clientState
			if err := json.Unmarshal(data, &got); err != nil || len(got.Messages) != 30 {
				b.Fatalf("decode = %d messages, %v", len(got.Messages), err)
			}
		}
	})
	b.Run("fastjson", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			var got runState
			if err := fastjson.Unmarshal(data, &got); err != nil || len(got.Messages) != 30 {
				b.Fatalf("decode = %d messages, %v", len(got.Messages), err)
			}
		}
	})
}

// BenchmarkEncodeRunState encodes the state of BenchmarkDecodeRunState as
// a pause does: as it was, with store.EncodeJSON (encoding/json), and as
// it is, with encodeState.
func BenchmarkEncodeRunState(b *testing.B) {
	st := benchRunState()
	for _, e := range []struct {
		name   string
		encode func(any) ([]byte, error)
	}{
		{"encoding-json", store.EncodeJSON},
		{"segmentio", func(v any) ([]byte, error) { return encodeState(v), nil }},
	} {
		b.Run(e.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.encode(st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchRunState is the state of a run paused after ten exchanges with
// tool output, about 35 KB as JSON.
func benchRunState() runState {
	st := runState{User: "U1", Channel: "C1", Steps: 10, Slots: []slot{{ToolCallID: "call_9", Tool: "kubectl_delete", CallID: "r.0"}}}
	for i := range 10 {
		id := fmt.Sprintf("call_%d", i)
		st.Messages = append(st.Messages,
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: "check the pods in prod, and why the \"api\" ones restart " + strings.Repeat("again ", 20)},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{ID: id, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "kubectl_get", Arguments: `{"resource":"pods","namespace":"prod"}`}}}},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: id, Content: strings.Repeat("api-7d9f8b6c5d-x2x4q   1/1   Running   3 (2m ago)   3d\n", 60)})
	}
	return st
}

var historyInputs = []string{
	`[{"role":"user","content":"hi <b> & \u2028 é \ud800"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"http_get","arguments":"{\"url\":\"http://x/<a>\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}]`,
	`[{"role":"assistant","content":"","function_call":{"name":"f","arguments":"{}"},"name":"bot","reasoning_content":"because","refusal":"no"}]`,
	`[{"role":"user","content":[{"type":"text","text":"parts"},{"type":"image_url","image_url":{"url":"http://i"}}]}]`,
	`[{"role":"user","content":"text"},{"role":"user","content":[{"type":"text","text":"a list after a text"}]}]`,
	`[{"role":"user","MultiContent":[{"type":"text","text":"by field name"}]}]`,
	`[{"ROLE":"user","Content":"keys in other cases","TOOL_CALL_ID":"x"}]`,
	`[{"role":"user","content":null},{"role":"tool","tool_calls":null}]`,
	`[{"role":"user","content":5}]`,
	`[{"role":"user","content":{"not":"text"}}]`,
	`[{"role":"user","content":"unknown fields","extra":[1,{"a":null}]}]`,
	`[{"role":"user","content":"x"},"not a message"]`,
	`[]`,
	`null`,
	`{"role":"user"}`,
	`[{"role":"user","content":"truncated"`,
}

// TestHistoryDecodesAsTheClient decodes each stored history as a history
// and as the client's own messages, and wants the same messages and the
// same error.
func TestHistoryDecodesAsTheClient(t *testing.T) {
	for _, in := range historyInputs {
		var got history
		var want []openai.ChatCompletionMessage
		gotErr := json.Unmarshal([]byte(in), &got)
		wantErr := json.Unmarshal([]byte(in), &want)
		if !reflect.DeepEqual([]openai.ChatCompletionMessage(got), want) || errText(gotErr) != errText(wantErr) {
			t.Errorf("history of %s = %#v, %v; want %#v, %v", in, got, gotErr, want, wantErr)
		}
		var st runState
		var wantSt struct {
			Messages []openai.ChatCompletionMessage `json:"messages"`
		}
		gotErr = fastjson.Unmarshal([]byte(`{"messages":`+in+`}`), &st)
		wantErr = json.Unmarshal([]byte(`{"messages":`+in+`}`), &wantSt)
		if !reflect.DeepEqual([]openai.ChatCompletionMessage(st.Messages), wantSt.Messages) || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("run state with messages %s = %#v, %v; want %#v, %v", in, st.Messages, gotErr, wantSt.Messages, wantErr)
		}
	}
}

func FuzzHistory(f *testing.F) {
	for _, in := range historyInputs {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var got history
		var want []openai.ChatCompletionMessage
		gotErr := json.Unmarshal(in, &got)
		wantErr := json.Unmarshal(in, &want)
		if !reflect.DeepEqual([]openai.ChatCompletionMessage(got), want) || errText(gotErr) != errText(wantErr) {
			t.Fatalf("history of %q = %#v, %v; want %#v, %v", in, got, gotErr, want, wantErr)
		}
	})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// statesOf are states with text as their messages' contents, the
// queued messages' and the results'.
func statesOf(text string) []any {
	msgs := history{
		{Role: openai.ChatMessageRoleUser, Content: text, Name: "U1"},
		{Role: openai.ChatMessageRoleAssistant, ReasoningContent: text, ToolCalls: []openai.ToolCall{{ID: "c1", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "http_get", Arguments: `{"url": "` + text + `"}`}}}},
		{Role: openai.ChatMessageRoleTool, ToolCallID: "c1", Content: text},
		{Role: openai.ChatMessageRoleAssistant, FunctionCall: &openai.FunctionCall{Name: "f", Arguments: text}, Refusal: text},
	}
	parts := history{{Role: openai.ChatMessageRoleUser, MultiContent: []openai.ChatMessagePart{{Type: openai.ChatMessagePartTypeText, Text: text}}}}
	at := time.Date(2026, 12, 5, 6, 0, 0, 123456789, time.UTC)
	res := &Result{Content: text, IsError: true}
	return []any{
		runState{Messages: msgs, Slots: []slot{{ToolCallID: "c1", Tool: "http_get", Result: res, Ran: true}, {ToolCallID: "c2", Tool: "deploy", CallID: "r.1"}}, User: "U1", Requesters: []string{"U1", "U2"}, Channel: "C1", Steps: 2},
		runState{Messages: parts},
		runState{},
		convState{Messages: msgs, Queued: []queuedMessage{{User: "U2", Channel: "C1", Text: text, At: at}}, InboxSeq: 7, Step: &stepMark{Slots: []slot{{ToolCallID: "c1", Tool: "t", Result: res}}, Started: -1, Steps: 1, User: "U1", Channel: "C1"}, Skipped: 3},
		convState{Messages: parts},
		convState{},
	}
}

var stateTexts = []string{"plain", `<b> & "quoted" \ back`, "line\nbreak\ttab \u2028 \u0000", "é 🙂", "invalid \xff\xfe utf-8", ""}

// TestEncodeStateDecodesAsEncodeJSON encodes states with encodeState and
// with store.EncodeJSON, as they were, and wants both to decode to the
// same state, and to the same JSON values (no field named or left out
// otherwise).
func TestEncodeStateDecodesAsEncodeJSON(t *testing.T) {
	for _, text := range stateTexts {
		for _, st := range statesOf(text) {
			checkEncodeState(t, st)
		}
	}
}

func checkEncodeState(t *testing.T, st any) {
	t.Helper()
	got := encodeState(st)
	want, err := store.EncodeJSON(st)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("encodeState(%+v) =\n%s\nwant the bytes of store.EncodeJSON\n%s", st, got, want)
	}
	var gotAny, wantAny any
	if err := json.Unmarshal(got, &gotAny); err != nil {
		t.Fatalf("encodeState(%+v) = %s, which does not decode: %v", st, got, err)
	}
	must(t, json.Unmarshal(want, &wantAny))
	if !reflect.DeepEqual(gotAny, wantAny) {
		t.Errorf("encodeState(%+v) =\n%s\nwant the values of\n%s", st, got, want)
	}
	gotSt := reflect.New(reflect.TypeOf(st))
	wantSt := reflect.New(reflect.TypeOf(st))
	must(t, json.Unmarshal(got, gotSt.Interface()))
	must(t, json.Unmarshal(want, wantSt.Interface()))
	if !reflect.DeepEqual(gotSt.Interface(), wantSt.Interface()) {
		t.Errorf("encodeState(%+v) decodes to %+v, want %+v", st, gotSt.Elem(), wantSt.Elem())
	}
}

func FuzzEncodeState(f *testing.F) {
	for _, text := range stateTexts {
		f.Add(text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, st := range statesOf(text) {
			checkEncodeState(t, st)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
