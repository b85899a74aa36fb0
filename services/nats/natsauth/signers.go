package natsauth

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/services/platform/filewatch"
)

// signerSet is the content of a signers file.
type signerSet struct {
	byKey      map[string]string // public key → principal
	verifyFrom uint64
}

// Signers are the principals' public keys, read from a signers file and
// reloaded when it changes: they implement natsjs.Signers.
type Signers struct {
	file *filewatch.File[signerSet]
}

var _ natsjs.Signers = (*Signers)(nil)

// LoadSigners reads the signers file at path.
func LoadSigners(path string, log *slog.Logger) (*Signers, error) {
	f, err := filewatch.Load(path, "NATS signers", parseSigners, log)
	if err != nil {
		return nil, fmt.Errorf("natsauth: %w", err)
	}
	return &Signers{file: f}, nil
}

// Principal implements natsjs.Signers.
func (s *Signers) Principal(publicKey string) (string, bool) {
	p, ok := s.file.Value().byKey[publicKey]
	return p, ok
}

// VerifyFrom implements natsjs.Signers.
func (s *Signers) VerifyFrom() uint64 { return s.file.Value().verifyFrom }

// Len is the number of keys.
func (s *Signers) Len() int { return len(s.file.Value().byKey) }

// Watch reloads the file every interval until ctx ends.
func (s *Signers) Watch(ctx context.Context, interval time.Duration) { s.file.Watch(ctx, interval) }

// parseSigners reads "PRINCIPAL PUBLIC_KEY" lines and an optional
// "verify-from SEQUENCE". A file without keys is refused: it is more
// likely caught while being written than meant to refuse every event.
func parseSigners(data []byte) (signerSet, error) {
	set := signerSet{byKey: map[string]string{}}
	for n, f := range fieldLines(data) {
		if len(f) != 2 {
			return signerSet{}, fmt.Errorf("line %d: want \"PRINCIPAL PUBLIC_KEY\" or \"verify-from SEQUENCE\"", n)
		}
		if f[0] == "verify-from" {
			seq, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return signerSet{}, fmt.Errorf("line %d: verify-from: %w", n, err)
			}
			set.verifyFrom = seq
			continue
		}
		if err := CheckPrincipal(f[0]); err != nil {
			return signerSet{}, fmt.Errorf("line %d: %w", n, err)
		}
		if !nkeys.IsValidPublicUserKey(f[1]) {
			return signerSet{}, fmt.Errorf("line %d: %q is no user public key", n, f[1])
		}
		if other, ok := set.byKey[f[1]]; ok && other != f[0] {
			return signerSet{}, fmt.Errorf("line %d: key %s is already %s's", n, f[1], other)
		}
		set.byKey[f[1]] = f[0]
	}
	if len(set.byKey) == 0 {
		return signerSet{}, fmt.Errorf("no keys (caught while being written? replace it whole: write beside it, then rename)")
	}
	return set, nil
}
