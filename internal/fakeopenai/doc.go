// Package fakeopenai is an in-process server that speaks enough of the
// OpenAI Chat Completions API to test clients against it: it answers
// POST /v1/chat/completions, streaming (server-sent events ending with
// "data: [DONE]") or not, depending on the request's "stream" field, and
// GET /v1/models.
//
// Answers are scripted. Responses queued with [Server.Reply] are used in
// order, one per request; when the queue is empty, the function set with
// [Server.Handle] answers, and without one the server replies with the text
// [DefaultText]. Every decoded request is recorded, whichever way it was
// answered, and can be read back with [Server.Requests] or awaited with
// [Server.WaitRequests].
//
// A [Response] can be text split into several chunks, parallel tool calls
// whose deltas are interleaved by index with their arguments split in
// pieces, an HTTP error with an OpenAI-style error body, a delay before the
// answer, or a stream that stops after a number of chunks as if the
// connection had been cut.
//
// Like OpenAI, the server refuses a request offering more than [MaxTools]
// (128) tools, with OpenAI's status, words and code (400,
// array_above_max_length), so that tests see the limit a real deployment
// meets; [Server.SetMaxTools] raises the limit or lifts it, as for a
// server that accepts more.
//
// In tests, [New] starts a server that is closed when the test ends. Outside
// tests (a local playground), [Start] starts one and the caller calls
// [Server.Close].
package fakeopenai
