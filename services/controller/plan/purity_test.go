package plan

import (
	"os/exec"
	"strings"
	"testing"
)

// forbiddenImports are what the planner must never depend on, even
// through another package, with everything under them: I/O belongs to the
// controller's observe and execute steps. (net/url and net/netip, which
// the domain's validation uses, are pure.)
var forbiddenImports = []string{
	"net/http",             // no HTTP (webhooks are called off the pass)
	"os/exec",              // no processes
	"database/sql",         // no database
	"github.com/nats-io",   // no NATS
	"github.com/jackc",     // no PostgreSQL (pgx)
	"github.com/jonboulle", // no clock: the snapshot carries the time
}

// ownPackages are the packages of this module the planner may depend on:
// the domain, the view types and the generated protos.
var ownPackages = []string{
	"github.com/tetherhq/tether/events",
	"github.com/tetherhq/tether/projections",
	"github.com/tetherhq/tether/proto/",
	"github.com/tetherhq/tether/services/controller/plan",
}

// The planner is pure because the compiler sees what it imports: this
// test fails when a dependency of the package, direct or not, does I/O
// (go list -deps, the test's own imports left out).
func TestThePlannerImportsNoIO(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
	for _, dep := range deps {
		if dep == "net" { // sockets
			t.Errorf("the planner depends on %s", dep)
		}
		for _, bad := range forbiddenImports {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("the planner depends on %s", dep)
			}
		}
		if strings.HasPrefix(dep, "github.com/tetherhq/tether/") && !isOwnPackage(dep) {
			t.Errorf("the planner depends on %s: only the domain, the view types and the protos are its own", dep)
		}
	}
}

// isOwnPackage reports whether dep is one of ownPackages (or under a
// prefix of them that ends in "/").
func isOwnPackage(dep string) bool {
	for _, p := range ownPackages {
		if dep == p || strings.HasSuffix(p, "/") && strings.HasPrefix(dep, p) {
			return true
		}
	}
	return false
}
