package lease

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/natstest"
)

// A renewal whose earlier attempt was stored without its answer reaching
// the holder finds its own write on the bucket's leader and keeps the
// tenure, even while a replica behind the leader (natstest.BehindReplica:
// it holds another key alone) answers half of the bucket's direct gets
// with "no such key". Ten renewals: one read from that replica escapes
// with odds of 1 in 1,024.
func TestRenewalFindsItsOwnWriteOnTheLeader(t *testing.T) {
	ctx := t.Context()
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	if err := Setup(ctx, js, time.Minute, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	natstest.BehindReplica(t, js, "KV_"+Bucket, "$KV."+Bucket+".other")
	l, err := Open(ctx, js, "controller", "me", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		acked, err := kv.Put(ctx, "controller", []byte("me")) // a write whose answer reached us
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "controller", []byte("me")); err != nil { // the next, stored, its answer lost
			t.Fatal(err)
		}
		l.revision, l.validUntil = acked, time.Now().Add(l.ttl)
		if err := l.renew(ctx); err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
	}
}
