package controller

import (
	"strings"
	"testing"
	"time"
)

// Options that cannot work are refused with what to change, not run: a
// backoff whose base exceeds its cap, a host declared LOST no later than
// UNREACHABLE.
func TestOptionsThatCannotWorkAreRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  func(*Options)
		want string // "" when valid
	}{
		{"defaults", func(*Options) {}, ""},
		{"backoff base above cap", func(o *Options) { o.StartBackoffBase, o.StartBackoffCap = time.Minute, time.Second }, "base (1m0s) is longer than its cap (1s)"},
		{"backoff base equals cap", func(o *Options) { o.StartBackoffBase, o.StartBackoffCap = time.Minute, time.Minute }, ""},
		{"lost before unreachable", func(o *Options) { o.UnreachableAfter, o.LostAfter = time.Minute, 30*time.Second }, "make host-lost-after the longer"},
		{"lost equals unreachable", func(o *Options) { o.UnreachableAfter, o.LostAfter = time.Minute, time.Minute }, "make host-lost-after the longer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{}
			tt.set(&o)
			o.setDefaults()
			err := o.validateTimings()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}
