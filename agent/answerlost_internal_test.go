package agent

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// redisReply stands for an error reply of Redis (go-redis's redis.Error).
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

// A step Redis Cluster did not make for now (a slot moving, a node not
// serving yet) is asked again, as a lost answer is; an error reply the
// store gave otherwise is not, and a transport's failure is.
func TestAnswerLost(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{redisReply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{fmt.Errorf("begin resume: %w", redisReply("CLUSTERDOWN The cluster is down")), true},
		{redisReply("LOADING Redis is loading the dataset in memory"), true},
		{redisReply("MASTERDOWN Link with MASTER is down"), true},
		{redisReply("ERR user_script:12: attempt to index a nil value"), false},
		{redisReply("TRYAGAINX not a code"), false},
		{context.DeadlineExceeded, true},
		{errors.New("of no known kind"), true},
		{nil, false},
	} {
		if got := answerLost(tt.err); got != tt.want {
			t.Errorf("answerLost(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
