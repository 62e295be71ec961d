// Command loadbench measures the bot under load. It runs the real bot
// binary (cmd/bot, built into a temporary directory unless -bot names
// one) as one or more processes against a fake Slack (internal/fakeslack)
// and a scripted fake model (internal/fakeopenai), both served by this
// process on 127.0.0.1, and checks that nothing is lost.
//
// Every conversation is a mention; the model answers it with one http_get
// call on a tool server of the bench, which the policy asks about (a card
// the bench approves after -click-delay) or allows (-ask sets the share),
// and then with a final answer. The tool server sees every execution, so
// each call is checked to run exactly once, and only after its click.
//
// Phases, in order:
//
//   - probe (-probe N): N conversations one at a time, after one warm-up,
//     with the bots' toolgate_store_calls_total scraped between the steps
//     (the tool is held until the scrape), to count store calls per pause
//     (mention -> card), decide (click -> tool starts) and resume (tool ->
//     answer), and, while the tool is still held, the Home tabs' round
//     that the card and the decision set off (2 s after the card), on a
//     line of its own. The bots' periodic passes (health probes, takeover
//     scans, sweeps, expiry passes) fall into whichever step is open and
//     are left out, with their Redis round trips;
//   - load: -conversations mentions (or -rate x -duration) at -rate per
//     second, with the websocket round trip sampled meanwhile;
//   - paused (-paused 100,10000,...): after -paused-warmup conversations
//     whose call is allowed, answered at the parking pace (so that every
//     count is sampled after a like burst), runs parked (cards never
//     clicked) up to each count, then the bots' memory (RSS and its part mapped
//     from files, from /proc/PID/status; the Go heap in use, the free heap
//     not returned to the OS, the next collection's heap goal, stacks and
//     goroutines from /metrics; open files) and the stored bytes per run. Memory is read once the
//     parking burst is over (the bots' store calls have stopped), and
//     again at its peak over one whole garbage collection cycle of each
//     bot's own beginning at least -settle-after (100 s: past the 90 s
//     after which idle HTTP connections are closed) after the burst, the
//     same wait for every count (-settle): within a cycle the heap swings from
//     what is live to the next collection's goal, so a single reading
//     depends on where in its cycle the bot happens to be. Parking 100,000
//     runs takes minutes and memory in this process too (the fakes keep
//     every message); it is off by default.
//
// The report is a table on stdout and, with -json FILE, JSON. The exit
// status is 1 when anything was lost, duplicated (a call run, or a card or
// an answer posted, more than once in a conversation), unapproved or
// unacked, when an envelope was acked only once the fake delivered it
// again (the bot it was sent to closed its connection without acking it),
// when an answer went to another conversation's thread, or when a click
// never reached a bot. A conversation counts as answered only by
// a message that holds its own answer: a stream stopped before it is no
// answer. The accounting is taken once the bots have stopped, so that it
// sees every execution they made, however late.
//
// Times the bot adds are end to end minus the time spent in the fakes: the
// time the fake model spent on each model call (from the start of its
// request's read) and the tool's time. Ack times are from the fake writing
// an envelope to its queue to reading the ack, for the envelopes acked at
// their first delivery.
//
// With -store redis the bots use -redis-url (default $REDIS_URL) with a
// fresh REDIS_PREFIX; its keys are deleted at the end. Stored bytes are
// measured with MEMORY USAGE on single-node Redis URLs only.
package main
