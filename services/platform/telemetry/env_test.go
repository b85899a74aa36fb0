package telemetry_test

import (
	"context"
	"testing"

	"github.com/tetherhq/tether/services/platform/telemetry"
)

// Export is off unless the standard variables ask for it, and a protocol
// or exporter Tether cannot serve is an error, not a silent no-op.
func TestSpanExporterFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    bool // an exporter
		wantErr bool
	}{
		{"unset: off", nil, false, false},
		{"endpoint: http/protobuf by default", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, false},
		{"traces endpoint over gRPC", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, false},
		{"otlp to the default endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, false},
		{"none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, false, false},
		{"an exporter Tether has not", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, true},
		{"a protocol Tether has not", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
				"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
				t.Setenv(k, tc.env[k])
			}
			exp, err := telemetry.SpanExporterFromEnv(context.Background())
			if (err != nil) != tc.wantErr || (exp != nil) != tc.want {
				t.Fatalf("exporter %v, err %v; want an exporter %v, an error %v", exp, err, tc.want, tc.wantErr)
			}
			if exp != nil {
				if err := exp.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
