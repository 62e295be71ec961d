//go:build tools

package tools

import (
	_ "github.com/alicebob/miniredis/v2"
	_ "github.com/google/cel-go/cel"
	_ "github.com/gorilla/websocket"
	_ "github.com/kelseyhightower/envconfig"
	_ "github.com/modelcontextprotocol/go-sdk/mcp"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/santhosh-tekuri/jsonschema/v6"
	_ "github.com/sashabaranov/go-openai"
	_ "github.com/slack-go/slack"
	_ "go.etcd.io/bbolt"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/sync/errgroup"
)
