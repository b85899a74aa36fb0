package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// daysValue is a duration flag that also takes days: "14d", "36h", "90m".
type daysValue struct{ d *time.Duration }

func (v daysValue) String() string {
	if v.d == nil {
		return ""
	}
	if *v.d > 0 && *v.d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(*v.d/(24*time.Hour)), 10) + "d"
	}
	return v.d.String()
}

// Set parses a positive duration: a number of days with "d", or a Go
// duration.
func (v daysValue) Set(s string) error {
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseFloat(n, 64)
		if err != nil {
			return fmt.Errorf("%q: want days (14d) or a duration (36h)", s)
		}
		d = time.Duration(days * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("%q: want days (14d) or a duration (36h)", s)
		}
	}
	if d <= 0 {
		return fmt.Errorf("%q: want a positive duration", s)
	}
	*v.d = d
	return nil
}

func (daysValue) Type() string { return "duration" }

// bytesValue is a size flag: bytes, or with a unit: "10MiB", "1GiB",
// "500MB", "64k".
type bytesValue struct{ n *int64 }

// byteUnits are the units bytesValue takes, by their lower-case spelling.
var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1000,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1000 * 1000,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1000 * 1000 * 1000,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1000 * 1000 * 1000 * 1000,
}

func (v bytesValue) String() string {
	if v.n == nil {
		return ""
	}
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if *v.n >= u.size && *v.n%u.size == 0 {
			return strconv.FormatInt(*v.n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(*v.n, 10)
}

// Set parses a positive size.
func (v bytesValue) Set(s string) error {
	num := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	unit, ok := byteUnits[strings.ToLower(strings.TrimSpace(s[len(num):]))]
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || n <= 0 || n > (1<<62)/unit {
		return fmt.Errorf("%q: want a positive size, in bytes or with a unit (10MiB, 1GiB)", s)
	}
	*v.n = n * unit
	return nil
}

func (bytesValue) Type() string { return "size" }
