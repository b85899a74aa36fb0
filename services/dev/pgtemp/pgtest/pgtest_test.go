package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/services/dev/pgtemp/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestDatabasesAreMigratedAndIsolated(t *testing.T) {
	ctx := context.Background()
	a, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	b, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	if _, err := a.Exec(ctx, `INSERT INTO projector_checkpoints (partition, sequence) VALUES ('x', 7)`); err != nil {
		t.Fatalf("migrated table missing: %v", err)
	}
	var n int
	if err := b.QueryRow(ctx, `SELECT count(*) FROM projector_checkpoints`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("second database sees %d rows written to the first", n)
	}
}
