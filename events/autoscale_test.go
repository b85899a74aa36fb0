package events_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

func TestBufferFor(t *testing.T) {
	for _, tt := range []struct {
		size      string
		allocated int
		want      int
		err       bool
	}{
		{"3", 0, 3, false}, {"3", 10, 3, false}, {"0", 5, 0, false},
		{"20%", 0, 1, false}, {"0%", 0, 0, false}, {"20%", 10, 2, false}, {"20%", 11, 3, false}, {"100%", 7, 7, false},
		{"", 0, 0, true}, {"-1", 0, 0, true}, {"x%", 0, 0, true}, {"2000%", 0, 0, true}, {"3.5", 0, 0, true},
	} {
		got, err := events.BufferFor(tt.size, tt.allocated)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("BufferFor(%q, %d) = %d, %v; want %d, error %v", tt.size, tt.allocated, got, err, tt.want, tt.err)
		}
	}
}

func TestPolicyAtPicksTheScheduleInForce(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	a := &eventsv1.FleetAutoscaling{MinReplicas: 1, MaxReplicas: 10, Buffer: &eventsv1.BufferPolicy{BufferSize: "2"},
		Schedules: []*eventsv1.AutoscalingSchedule{{
			Name: "launch", StartTime: timestamppb.New(t0), EndTime: timestamppb.New(t0.Add(time.Hour)),
			MinReplicas: 5, MaxReplicas: 50, Buffer: &eventsv1.BufferPolicy{BufferSize: "20%"},
		}}}
	for _, tt := range []struct {
		at   time.Time
		want string
		max  int32
	}{
		{t0.Add(-time.Second), "buffer 2", 10},
		{t0, "schedule launch: buffer 20%", 50},
		{t0.Add(time.Hour - time.Second), "schedule launch: buffer 20%", 50},
		{t0.Add(time.Hour), "buffer 2", 10},
	} {
		p := events.PolicyAt(a, tt.at)
		if p.String() != tt.want || p.Max != tt.max {
			t.Errorf("at %v: %q max %d, want %q max %d", tt.at, p, p.Max, tt.want, tt.max)
		}
	}
	if got := (events.ScalingPolicy{Min: 2, Max: 5}).Clamp(9); got != 5 {
		t.Errorf("Clamp(9) = %d", got)
	}
	if got := (events.ScalingPolicy{Min: 2, Max: 5}).Clamp(0); got != 2 {
		t.Errorf("Clamp(0) = %d", got)
	}
}

func TestValidateAutoscaling(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	buf := &eventsv1.BufferPolicy{BufferSize: "3"}
	for _, tt := range []struct {
		name string
		a    *eventsv1.FleetAutoscaling
		want string // "" valid, else in the error
	}{
		{"buffer", &eventsv1.FleetAutoscaling{MaxReplicas: 10, Buffer: buf}, ""},
		{"scale to zero", &eventsv1.FleetAutoscaling{MinReplicas: 0, MaxReplicas: 1, Buffer: buf}, ""},
		{"webhook", &eventsv1.FleetAutoscaling{MaxReplicas: 10, Webhook: &eventsv1.WebhookPolicy{Url: "https://scaler.example/fleet"}}, ""},
		{"no max", &eventsv1.FleetAutoscaling{Buffer: buf}, "max_replicas"},
		{"min above max", &eventsv1.FleetAutoscaling{MinReplicas: 5, MaxReplicas: 2, Buffer: buf}, "min_replicas"},
		{"no policy", &eventsv1.FleetAutoscaling{MaxReplicas: 2}, "exactly one policy"},
		{"two policies", &eventsv1.FleetAutoscaling{MaxReplicas: 2, Buffer: buf, Webhook: &eventsv1.WebhookPolicy{Url: "http://x"}}, "exactly one policy"},
		{"bad buffer", &eventsv1.FleetAutoscaling{MaxReplicas: 2, Buffer: &eventsv1.BufferPolicy{BufferSize: "lots"}}, "buffer_size"},
		{"bad url", &eventsv1.FleetAutoscaling{MaxReplicas: 2, Webhook: &eventsv1.WebhookPolicy{Url: "file:///etc/passwd"}}, "webhook.url"},
		{"bad window", &eventsv1.FleetAutoscaling{MaxReplicas: 2, Buffer: buf, Schedules: []*eventsv1.AutoscalingSchedule{{
			StartTime: timestamppb.New(t0), EndTime: timestamppb.New(t0), Buffer: buf}}}, "schedules[0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := minimalSpec()
			spec.Autoscaling = tt.a
			err := events.ValidateFleetSpec(spec)
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("ValidateFleetSpec = %v, want %q", err, tt.want)
			}
		})
	}
}

// An autoscaling decision sets the replicas once per change; a failure is
// recorded once per error, and a success after it recovers.
func TestDecideFleetAutoscale(t *testing.T) {
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	spec := minimalSpec()
	spec.Replicas = 2
	spec.Autoscaling = &eventsv1.FleetAutoscaling{MaxReplicas: 10, Buffer: &eventsv1.BufferPolicy{BufferSize: "3"}}
	st, err := events.ApplyFleet(nil, events.New(fleetName, at, &eventsv1.FleetCreated{Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}
	step := func(cmd events.FleetCommand) string {
		t.Helper()
		msgs, err := events.DecideFleet(fleetName, st, cmd)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, m := range msgs {
			types = append(types, events.TypeOf(m))
			if st, err = events.ApplyFleet(st, events.New(fleetName, at, m)); err != nil {
				t.Fatal(err)
			}
		}
		return strings.Join(types, ",")
	}
	scale := func(to int32) events.RecordAutoscale {
		return events.RecordAutoscale{Decision: &eventsv1.FleetAutoscaled{ToReplicas: to, Policy: "buffer 3"}}
	}
	fail := events.RecordAutoscaleFailure{Policy: "webhook http://x", Error: "timeout after 1s"}
	for i, s := range []struct {
		cmd  events.FleetCommand
		want string
	}{
		{scale(2), ""},
		{scale(5), "FleetAutoscaled"},
		{fail, "FleetAutoscaleFailed"},
		{fail, ""},
		{events.RecordAutoscaleFailure{Policy: "webhook http://x", Error: "503"}, "FleetAutoscaleFailed"},
		{scale(5), "FleetAutoscaleRecovered"},
		{scale(4), "FleetAutoscaled"},
	} {
		if got := step(s.cmd); got != s.want {
			t.Fatalf("step %d: %q, want %q", i, got, s.want)
		}
	}
	if st.GetSpec().GetReplicas() != 4 || st.GetLastAutoscale().GetFromReplicas() != 5 || st.GetAutoscaleFailing() != nil {
		t.Fatalf("state: replicas %d, last %v, failing %v", st.GetSpec().GetReplicas(), st.GetLastAutoscale(), st.GetAutoscaleFailing())
	}
	// A fleet without autoscaling takes no decision.
	plain, err := events.ApplyFleet(nil, events.New(fleetName, at, &eventsv1.FleetCreated{Spec: minimalSpec()}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.DecideFleet(fleetName, plain, scale(3)); err == nil {
		t.Fatal("an autoscaling decision on a fleet without autoscaling was taken")
	}
}
