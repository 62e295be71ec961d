package slackapp

import (
	"context"
	"sync"

	"github.com/toolgate/toolgate/internal/fixedkey"
)

// maxRecentMessages bounds the messages a process remembers recording;
// past it the oldest are forgotten, and a later copy of one of them is
// de-duplicated by the store instead.
const maxRecentMessages = 4096

// recentMessages lets the copies of one message that reach this process
// (Slack sends a mention as an app_mention and a message event, with the
// same channel and ts) cost one store write: the first copy records the
// message, later ones wait for it and are dropped if it was recorded. A
// copy that reaches another replica is de-duplicated by the store, which
// stays the truth; this only saves the second round trip.
//
// The messages are kept under fixed-size keys, in a map and a ring
// allocated once, so remembering one allocates nothing that outlives its
// recording.
type recentMessages struct {
	mu   sync.Mutex
	byID map[fixedkey.Key]*recording
	ring []fixedkey.Key // the keys in byID, oldest at next; zero where forgotten
	next int
}

// recording is one message being recorded, or recorded, by this process.
type recording struct {
	done chan struct{}
	// slot is where the key is in the ring.
	slot int
	// recorded is set before done is closed: the store has the message
	// (recorded now, or found a duplicate of it).
	recorded bool
}

// begin returns the recording of the message msgID; first is true if this
// copy is the first and must record it, then finish it.
func (r *recentMessages) begin(msgID string) (rec *recording, first bool) {
	rec = &recording{done: make(chan struct{})}
	key, ok := fixedkey.Of(msgID)
	if !ok {
		return rec, true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if seen, ok := r.byID[key]; ok {
		return seen, false
	}
	if r.byID == nil {
		r.byID = make(map[fixedkey.Key]*recording, maxRecentMessages)
		r.ring = make([]fixedkey.Key, maxRecentMessages)
	}
	if old := r.ring[r.next]; old != (fixedkey.Key{}) {
		delete(r.byID, old)
	}
	r.ring[r.next] = key
	rec.slot = r.next
	r.next = (r.next + 1) % len(r.ring)
	r.byID[key] = rec
	if r.next == 0 {
		r.byID = fixedkey.Compacted(r.byID, maxRecentMessages)
	}
	return rec, true
}

// recordedMessage is the recording of every message recorded: once
// finished, a recording of its own would only cost memory.
var recordedMessage = func() *recording {
	rec := &recording{done: make(chan struct{}), recorded: true}
	close(rec.done)
	return rec
}()

// finish ends the first copy's recording; recorded says that later copies
// are dropped (the message is recorded, or answered without a record). A
// message that was not (a thread reply outside the bot's conversations,
// or one left for Slack to deliver again) is forgotten, so the next copy
// tries for itself: an app_mention copy of a thread reply starts a
// conversation where the message copy did not.
func (r *recentMessages) finish(msgID string, rec *recording, recorded bool) {
	rec.recorded = recorded
	if key, ok := fixedkey.Of(msgID); ok {
		r.mu.Lock()
		if r.byID[key] == rec {
			if recorded {
				r.byID[key] = recordedMessage
			} else {
				// Its slot is freed too, or, when it comes round, it would
				// forget the recording of a later copy in another slot.
				delete(r.byID, key)
				r.ring[rec.slot] = fixedkey.Key{}
			}
		}
		r.mu.Unlock()
	}
	close(rec.done)
}

// wait waits for the first copy's recording and reports whether it
// recorded the message; false if ctx ends first.
func (rec *recording) wait(ctx context.Context) bool {
	select {
	case <-rec.done:
		return rec.recorded
	case <-ctx.Done():
		return false
	}
}
