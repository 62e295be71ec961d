package agent

import (
	"encoding/json"
	"fmt"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fastjson"
)

// history is a conversation's messages as stored in a run's or a
// conversation's state. It decodes as []openai.ChatCompletionMessage
// does, several times faster: the client's UnmarshalJSON decodes each
// message apart with encoding/json (twice when its content is a list of
// parts), which made decoding a paused run's history most of the bot's
// work between an approval and its call running. A history whose
// messages all have text content decodes through fastjson into a struct
// with the same fields as the client's first attempt; any other is left
// to the client. It encodes as the client does.
type history []openai.ChatCompletionMessage

// plainMessage is openai.ChatCompletionMessage without its methods: the
// fields the client's UnmarshalJSON tries first, content as text.
type plainMessage openai.ChatCompletionMessage

// UnmarshalJSON decodes a stored history.
func (h *history) UnmarshalJSON(b []byte) error {
	var plain []plainMessage
	if fastjson.Unmarshal(b, &plain) == nil {
		if plain == nil {
			*h = nil
			return nil
		}
		msgs := make(history, len(plain))
		for i, m := range plain {
			msgs[i] = openai.ChatCompletionMessage(m)
		}
		*h = msgs
		return nil
	}
	// What it fails on, it fails on as the client does, leaving what
	// the client leaves.
	var msgs []openai.ChatCompletionMessage
	err := json.Unmarshal(b, &msgs)
	*h = msgs
	return err
}

// encodeState is the JSON of a run's or a conversation's state, as
// store.EncodeJSON writes it (no HTML escaping), through fastjson.Marshal:
// encoding/json re-scans what each message's MarshalJSON returns to
// compact it, most of the work of encoding a long history. It writes the same bytes
// (TestEncodeStateDecodesAsEncodeJSON checks the bytes and the values),
// so replicas of an earlier version read it as before.
func encodeState(v any) json.RawMessage {
	b, err := fastjson.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", v, err))
	}
	return b
}
