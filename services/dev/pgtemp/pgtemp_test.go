package pgtemp_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/services/dev/pgtemp"
)

func TestStartQueryStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateDatabase(ctx, "app", ""); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, s.URL("app"))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT 40 + 2").Scan(&n); err != nil || n != 42 {
		t.Fatalf("query: %d, %v", n, err)
	}
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := pgx.Connect(ctx, s.URL("app")); err == nil {
		t.Fatal("server still accepts connections after Stop")
	}
	if err := syscall.Kill(s.PID(), 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("postgres process %d still exists after Stop (kill -0: %v)", s.PID(), err)
	}
	if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("server dir %s not removed: %v", s.Dir(), err)
	}
}
