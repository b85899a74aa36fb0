package main

import (
	"testing"
	"time"
)

func TestDaysValue(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
		str  string
	}{
		{"14d", 14 * 24 * time.Hour, true, "14d"},
		{"1.5d", 36 * time.Hour, true, "36h0m0s"},
		{"36h", 36 * time.Hour, true, "36h0m0s"},
		{"90m", 90 * time.Minute, true, "1h30m0s"},
		{"0d", 0, false, ""},
		{"-1h", 0, false, ""},
		{"d", 0, false, ""},
		{"two weeks", 0, false, ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var d time.Duration
			v := daysValue{&d}
			err := v.Set(tc.in)
			if (err == nil) != tc.ok || (tc.ok && (d != tc.want || v.String() != tc.str)) {
				t.Fatalf("Set(%q): %v %v %q, want %v ok=%v %q", tc.in, d, err, v.String(), tc.want, tc.ok, tc.str)
			}
		})
	}
}

func TestBytesValue(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
		str  string
	}{
		{"1GiB", 1 << 30, true, "1GiB"},
		{"10MiB", 10 << 20, true, "10MiB"},
		{"10mib", 10 << 20, true, "10MiB"},
		{"500MB", 500_000_000, true, "500000000"},
		{"64k", 64 << 10, true, "64KiB"},
		{"4096", 4096, true, "4KiB"},
		{"1000", 1000, true, "1000"},
		{"0", 0, false, ""},
		{"1.5GiB", 0, false, ""},
		{"10 parsecs", 0, false, ""},
		{"GiB", 0, false, ""},
		{"99999999999TiB", 0, false, ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var n int64
			v := bytesValue{&n}
			err := v.Set(tc.in)
			if (err == nil) != tc.ok || (tc.ok && (n != tc.want || v.String() != tc.str)) {
				t.Fatalf("Set(%q): %d %v %q, want %d ok=%v %q", tc.in, n, err, v.String(), tc.want, tc.ok, tc.str)
			}
		})
	}
}
