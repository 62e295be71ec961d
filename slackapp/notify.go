package slackapp

import "context"

// noticeQueueSize bounds the private answers waiting for the notifier.
const noticeQueueSize = 64

// busyClickText tells someone their click found every handler busy.
const busyClickText = "I'm busy right now; nothing changed — please click again."

// notice is a private answer to one person.
type notice struct {
	user, channel, text string
}

// notify queues a private answer for the notifier without waiting: it is
// called from the Socket Mode loop. When the queue is full the answer is
// dropped with a log line and a metric.
func (a *App) notify(user, channel, text string) {
	select {
	case a.notices <- notice{user: user, channel: channel, text: text}:
	default:
		a.log.Warn("too busy to tell someone their click was not handled; dropped", "user", user)
		a.m.error("notice_dropped")
	}
}

// notifier sends the queued notices, one at a time, until the queue is
// closed at shutdown.
func (a *App) notifier() {
	defer close(a.noticesDone)
	for n := range a.notices {
		a.tell(context.Background(), n.user, n.channel, n.text)
	}
}
