package dev

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// hostMeters is the meter provider of one host's agent in the stack. The
// agents share the stack's provider, and an agent's metrics carry no host
// (in production each agent is a process of its own, told apart by its
// scrape target): each host's meters carry its id as an instrumentation
// attribute instead, which the Prometheus exporter turns into the label
// otel_scope_host, so that the hosts' outbox gauges do not overwrite one
// another on the stack's one /metrics.
type hostMeters struct {
	metric.MeterProvider
	host string
}

// Meter returns the named meter with the host's attribute.
func (h hostMeters) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	opts = append(opts, metric.WithInstrumentationAttributes(attribute.String("host", h.host)))
	return h.MeterProvider.Meter(name, opts...)
}

// agentMeters returns the meter provider of host id's agent: nil (the
// agent's no-op default) when the stack has none.
func agentMeters(mp metric.MeterProvider, id string) metric.MeterProvider {
	if mp == nil {
		return nil
	}
	return hostMeters{MeterProvider: mp, host: id}
}
