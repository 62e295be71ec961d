// Package telemetry traces the bot with OpenTelemetry: a span per turn, a
// child span per model call with the GenAI semantic conventions
// (gen_ai.operation.name, gen_ai.request.model, gen_ai.usage.*), a span per
// tool execution (gen_ai.tool.name, the verdict, the outcome), and for each
// paused call a span from the pause to its decision, linked to the turn
// that resumes it.
//
// Start exports over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, configured by the standard
// OTEL_* variables; otherwise it returns nil and nothing is traced or
// started. Tracer implements agent.Tracer; Tracer.Model wraps an
// agent.Model. Arguments, tool output and model messages are recorded only
// when capturing content is asked for (OTEL_CAPTURE_CONTENT=true).
package telemetry
