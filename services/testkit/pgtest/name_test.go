package pgtest

import (
	"strings"
	"testing"
)

func TestDatabaseName(t *testing.T) {
	tests := []struct {
		name string
		test string
		seq  uint64
		want string
	}{
		{name: "plain", test: "TestFleets", seq: 1, want: "t1_testfleets"},
		{name: "subtest and symbols", test: "TestAllocate/no ready server#01", seq: 12, want: "t12_testallocate_no_ready_server_01"},
		{name: "non-ASCII", test: "TestÜber", seq: 3, want: "t3_test_ber"},
		{name: "long", test: strings.Repeat("TestX", 30), seq: 18446744073709551615,
			want: "t18446744073709551615_" + strings.Repeat("testx", 9)[:41]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := databaseName(tt.test, tt.seq)
			if got != tt.want {
				t.Errorf("databaseName(%q, %d) = %q, want %q", tt.test, tt.seq, got, tt.want)
			}
			if len(got) > maxNameLen {
				t.Errorf("databaseName(%q, %d) is %d bytes, over PostgreSQL's %d", tt.test, tt.seq, len(got), maxNameLen)
			}
		})
	}
}
