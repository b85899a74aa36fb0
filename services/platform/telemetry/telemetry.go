// Package telemetry builds the OpenTelemetry tracer and meter providers that
// each binary's main creates once and passes down (no globals), and the
// Prometheus handler that serves the metrics.
package telemetry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// Options configure the providers.
type Options struct {
	// ServiceName names the process in telemetry, e.g. "tether-apiserver".
	ServiceName string
	// SpanExporter receives finished spans. Nil takes the OTLP exporter
	// the standard environment variables configure (SpanExporterFromEnv),
	// or none when they are unset: spans then carry trace ids (so trace
	// context flows into events and logs) but are not sampled, which costs
	// next to nothing.
	SpanExporter sdktrace.SpanExporter
}

// Providers holds a process's telemetry.
type Providers struct {
	// TracerProvider creates tracers.
	TracerProvider *sdktrace.TracerProvider
	// MeterProvider creates meters; its readings are served by MetricsHandler.
	MeterProvider *sdkmetric.MeterProvider
	// Propagator reads and writes W3C trace context.
	Propagator propagation.TextMapPropagator
	// MetricsHandler serves the metrics in Prometheus text format.
	MetricsHandler http.Handler
}

// New builds the providers. Call Shutdown when done.
func New(opts Options) (*Providers, error) {
	if opts.ServiceName == "" {
		opts.ServiceName = "tether"
	}
	res := resource.NewSchemaless(semconv.ServiceName(opts.ServiceName))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	if opts.SpanExporter == nil {
		if opts.SpanExporter, err = SpanExporterFromEnv(context.Background()); err != nil {
			return nil, err
		}
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if opts.SpanExporter != nil {
		// The sampler is the SDK's default (every trace, or as
		// OTEL_TRACES_SAMPLER says).
		tpOpts = append(tpOpts, sdktrace.WithBatcher(opts.SpanExporter))
	} else {
		// Nothing exports: ids for the trace context, no recording, unless
		// a caller's context says its trace is sampled.
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	}
	return &Providers{
		TracerProvider: sdktrace.NewTracerProvider(tpOpts...),
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(exporter)),
		Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		MetricsHandler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

// Shutdown flushes and stops the providers.
func (p *Providers) Shutdown(ctx context.Context) error {
	return errors.Join(p.TracerProvider.Shutdown(ctx), p.MeterProvider.Shutdown(ctx))
}

// SpanExporterFromEnv returns the OTLP span exporter the standard
// OpenTelemetry environment variables configure, or nil when they
// configure none: tracing export is off unless OTEL_EXPORTER_OTLP_ENDPOINT
// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, or OTEL_TRACES_EXPORTER is
// otlp (then to the default endpoint); OTEL_TRACES_EXPORTER=none turns it
// off. The protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL: grpc, or http/protobuf (the default, as the
// specification says). The exporters read the rest themselves: endpoint,
// headers, certificates, compression and timeout.
func SpanExporterFromEnv(ctx context.Context) (sdktrace.SpanExporter, error) {
	switch exporter := os.Getenv("OTEL_TRACES_EXPORTER"); exporter {
	case "none":
		return nil, nil
	case "", "otlp":
		if exporter == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, nil
		}
	default:
		return nil, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%q: only otlp and none are supported", exporter)
	}
	protocol := cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf")
	var exp sdktrace.SpanExporter
	var err error
	switch protocol {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("telemetry: OTLP protocol %q: grpc and http/protobuf are supported", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP trace exporter (%s): %w", protocol, err)
	}
	return exp, nil
}
