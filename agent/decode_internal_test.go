package agent

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fastjson"
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
