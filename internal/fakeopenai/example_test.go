package fakeopenai_test

import (
	"context"
	"fmt"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
)

func Example() {
	s := fakeopenai.Start()
	defer s.Close()
	s.Reply(fakeopenai.Text("The disk is 93% full."))
	s.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		return fakeopenai.Text("You said: " + req.Messages[len(req.Messages)-1].Content)
	})

	cfg := openai.DefaultConfig("any key")
	cfg.BaseURL = s.URL()
	client := openai.NewClientWithConfig(cfg)
	for _, q := range []string{"How full is the disk?", "Thanks"} {
		resp, err := client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
			Model:    "any-model",
			Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: q}},
		})
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Println(resp.Choices[0].Message.Content)
	}
	fmt.Println(len(s.Requests()), "requests")
	// Output:
	// The disk is 93% full.
	// You said: Thanks
	// 2 requests
}
