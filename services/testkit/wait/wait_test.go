package wait_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/wait"
)

// recorder is a testing.TB whose Fatalf records the message instead of
// ending the test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

// TestUntilReportsWhatItLastSaw: Until returns once check passes, and a
// timeout names the last error check returned.
func TestUntilReportsWhatItLastSaw(t *testing.T) {
	n := 0
	wait.Until(t, 10*time.Second, "three polls", func() error {
		if n++; n < 3 {
			return fmt.Errorf("poll %d", n)
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("Until returned after %d polls", n)
	}

	r := &recorder{TB: t}
	polls := 0
	wait.Until(r, 30*time.Millisecond, "a count of 5", func() error {
		polls++
		return fmt.Errorf("count is %d", polls)
	})
	if !strings.Contains(r.msg, "a count of 5") || !strings.Contains(r.msg, fmt.Sprintf("last: count is %d", polls)) {
		t.Fatalf("timeout message %q does not name the wait and the last error (count is %d)", r.msg, polls)
	}
}
