// Package telemetry builds the OpenTelemetry tracer and meter providers that
// each binary's main creates once and passes down (no globals), and the
// Prometheus handler that serves the metrics.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	// SpanExporter receives finished spans; nil records spans (so trace
	// context flows into events) without exporting them.
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
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if opts.SpanExporter != nil {
		tpOpts = append(tpOpts, sdktrace.WithBatcher(opts.SpanExporter))
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
