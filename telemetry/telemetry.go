package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Provider exports the bot's traces. A nil *Provider is off: its methods
// do nothing.
type Provider struct {
	tp      *sdktrace.TracerProvider
	capture bool
	// opts configure each Tracer (see WithRedaction).
	opts []Option
}

// Enabled reports whether getenv asks for traces: an OTLP endpoint is set
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), the
// SDK is not disabled (OTEL_SDK_DISABLED) and OTEL_TRACES_EXPORTER is
// unset or "otlp".
func Enabled(getenv func(string) string) bool {
	if !endpointSet(getenv) || sdkDisabled(getenv) {
		return false
	}
	exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	return exp == "" || exp == "otlp"
}

func sdkDisabled(getenv func(string) string) bool {
	return strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true")
}

func endpointSet(getenv func(string) string) bool {
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// CheckEnv refuses OTEL_* settings the exporter would reject or misread, in
// words that quote none of their values (headers carry credentials, an
// endpoint may too): with an endpoint set and the SDK not disabled, a
// trace exporter other than otlp or none (the bot has no other, and would
// start without traces); and when tracing is on (see Enabled), a protocol
// other than http/protobuf or http/json (the bot speaks OTLP/HTTP only: a
// gRPC port would refuse every batch), an endpoint that is not an absolute
// http or https URL or that has a user name, password or query (the
// exporter sends to its host and path only, so the collector would refuse
// every batch as unauthenticated), headers that are not comma-separated
// key=value pairs with keys that are HTTP tokens and percent-encoded
// values (the exporter drops the others). Each setting is judged as the
// exporter reads it: its OTEL_EXPORTER_OTLP_TRACES_ variable when set,
// which replaces the general one, and the general one otherwise.
func CheckEnv(getenv func(string) string) error {
	if endpointSet(getenv) && !sdkDisabled(getenv) {
		switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
		case "", "otlp", "none":
		default:
			return errors.New("OTEL_TRACES_EXPORTER: the bot exports traces with otlp only (or none for no traces)")
		}
	}
	if !Enabled(getenv) {
		return nil
	}
	switch k, v := effective(getenv, "PROTOCOL"); v {
	case "", "http/protobuf", "http/json":
	default:
		return fmt.Errorf("%s: the bot exports over OTLP/HTTP only (http/protobuf or http/json); point the endpoint at the collector's OTLP/HTTP port, 4318 by default", k)
	}
	if err := checkEndpoint(effective(getenv, "ENDPOINT")); err != nil {
		return err
	}
	k, v := effective(getenv, "HEADERS")
	if v == "" {
		return nil
	}
	for i, pair := range strings.Split(v, ",") {
		name, val, ok := strings.Cut(pair, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return fmt.Errorf("%s: entry %d is not key=value", k, i+1)
		}
		if !httpToken(strings.TrimSpace(name)) {
			// The exporter leaves the entry out and sends the batch
			// without it: a credential in it would never arrive.
			return fmt.Errorf("%s: the name of entry %d is not an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~ only, no spaces)", k, i+1)
		}
		if _, err := url.PathUnescape(strings.TrimSpace(val)); err != nil {
			return fmt.Errorf("%s: the value of entry %d is not percent-encoded (%%25 for %%, %%2C for a comma)", k, i+1)
		}
	}
	return nil
}

// effective returns the variable the exporter reads setting from, and its
// value trimmed of spaces as the exporter trims it: the traces' own
// variable (OTEL_EXPORTER_OTLP_TRACES_setting) when it is set, the general
// one (OTEL_EXPORTER_OTLP_setting) otherwise. The exporter applies the
// traces' variable after the general one, replacing the general one's
// endpoint, protocol or headers whole, so a general value that the traces'
// variable overrides has no effect, whatever it is.
func effective(getenv func(string) string, setting string) (name, value string) {
	name = "OTEL_EXPORTER_OTLP_TRACES_" + setting
	if v := strings.TrimSpace(getenv(name)); v != "" {
		return name, v
	}
	name = "OTEL_EXPORTER_OTLP_" + setting
	return name, strings.TrimSpace(getenv(name))
}

// credentialsAdvice says where the exporter takes credentials from.
const credentialsAdvice = "send credentials in OTEL_EXPORTER_OTLP_HEADERS (such as Authorization=Basic%20<base64 of user:password> or Authorization=Bearer%20<token>)"

// checkEndpoint refuses an endpoint, the value v of the variable k, that
// is not an absolute http or https URL, or that has a user name, password
// or query: the exporter sends to the URL's host and path alone, dropping
// them, so credentials there never reach the collector.
func checkEndpoint(k, v string) error {
	u, err := url.Parse(v)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		if strings.Contains(v, "@") {
			// Most likely credentials in the URL, which would not
			// work once it parsed either.
			return fmt.Errorf("%s is not an absolute http or https URL; it seems to hold a user name or password, which the exporter does not send: %s", k, credentialsAdvice)
		}
		return fmt.Errorf("%s is not an absolute http or https URL", k)
	case u.User != nil:
		return fmt.Errorf("%s has a user name or password, which the exporter drops: %s", k, credentialsAdvice)
	case u.RawQuery != "":
		return fmt.Errorf("%s has a query, which the exporter drops: %s", k, credentialsAdvice)
	}
	return nil
}

// httpToken reports whether name is an HTTP token (RFC 9110), which is
// what the exporter takes as a header name: ASCII letters and digits and
// !#$%&'*+-.^_`|~.
func httpToken(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", c):
		default:
			return false
		}
	}
	return true
}

// Start returns a Provider exporting over OTLP/HTTP, configured by the
// standard OTEL_* variables of the process (endpoint, headers, timeout,
// sampler, batch settings, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES),
// when Enabled(getenv) says so; the service name defaults to "toolgate".
// Otherwise it returns nil, nil: nothing is started. capture records
// arguments, tool output and model messages in spans; opts configure the
// tracer of Tracer (WithRedaction cleans what the spans say). The exporter's
// errors (a collector that cannot be reached) go to log, as warnings, and
// so do the lines of OpenTelemetry's own logger (settings it cannot read,
// see logSink), in place of its plain lines on stderr: in the log's format,
// with its redaction. It fails only on settings the exporter refuses; it
// makes no connection.
func Start(ctx context.Context, getenv func(string) string, version string, capture bool, log *slog.Logger, opts ...Option) (*Provider, error) {
	if !Enabled(getenv) {
		return nil, nil
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: " + err.Error())
	}))
	otel.SetLogger(logr.New(logSink{log: log}))
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "toolgate")}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	switch {
	case errors.Is(err, resource.ErrPartialResource):
		log.Warn("tracing: OTEL_RESOURCE_ATTRIBUTES holds entries that are not key=value with percent-encoded values; the others apply")
	case err != nil:
		return nil, errors.Join(fmt.Errorf("trace resource: %w", err), exp.Shutdown(ctx))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{tp: tp, capture: capture, opts: opts}, nil
}

// Tracer returns the bot's tracer, or nil when p is nil.
func (p *Provider) Tracer() *Tracer {
	if p == nil {
		return nil
	}
	return NewTracer(p.tp, p.capture, p.opts...)
}

// Shutdown exports the spans not sent yet and stops the exporter; ctx
// bounds how long it may take. It does nothing on a nil Provider.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}

// logSink writes the lines of OpenTelemetry's logger (otel.SetLogger) to
// the bot's log, each message after "tracing: ": errors as errors, its
// warnings (verbosity 1) as warnings, its more verbose lines at debug.
// Values that say how to log themselves (logr.Marshaler) are logged so.
type logSink struct{ log *slog.Logger }

var _ logr.LogSink = logSink{}

func (logSink) Init(logr.RuntimeInfo) {}

func (s logSink) Enabled(v int) bool { return s.log.Enabled(context.Background(), sinkLevel(v)) }

func (s logSink) Info(v int, msg string, kv ...any) {
	s.log.Log(context.Background(), sinkLevel(v), "tracing: "+msg, marshalled(kv)...)
}

func (s logSink) Error(err error, msg string, kv ...any) {
	s.log.Error("tracing: "+msg, append([]any{"err", err}, marshalled(kv)...)...)
}

func (s logSink) WithValues(kv ...any) logr.LogSink {
	return logSink{log: s.log.With(marshalled(kv)...)}
}

func (s logSink) WithName(name string) logr.LogSink {
	return logSink{log: s.log.With("logger", name)}
}

// sinkLevel is the level of a line of logr verbosity v.
func sinkLevel(v int) slog.Level {
	switch {
	case v >= 4:
		return slog.LevelDebug
	case v >= 1:
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// marshalled returns a key/value list with each logr.Marshaler value
// replaced by what it says to log.
func marshalled(kv []any) []any {
	out := make([]any, len(kv))
	for i, v := range kv {
		if m, ok := v.(logr.Marshaler); ok && i%2 == 1 {
			v = m.MarshalLog()
		}
		out[i] = v
	}
	return out
}
