package agent_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
)

// sdkProtocolFiles are the files of the SDK's protocol servers: Tether's
// (tether.sdk.v1 over gRPC and REST, and in process). A second protocol's
// server is added here: Agones' (agones.dev.sdk.SDK, issue 41) is.
var sdkProtocolFiles = []string{"sdkserver.go", "sdkhandlers.go", "localsdk.go", "agonesserver.go", "agonescounters.go", "agonesplayers.go"}

// A protocol server reaches the agent only through sdkOps: it names no
// *Agent, no gameServer and no agentSDK, and does not look inside the
// sdkCaller it is given (its gs), so that every protocol carries a call to
// the same code.
func TestSDKProtocolServersCallTheAgentOnlyThroughSDKOps(t *testing.T) {
	forbidden := map[string]string{
		"Agent":      "the agent",
		"gameServer": "a game server",
		"agentSDK":   "the agent's side of sdkOps",
	}
	fset := token.NewFileSet()
	for _, name := range sdkProtocolFiles {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if n.Sel.Name == "gs" {
					t.Errorf("%s: looks inside an sdkCaller (.gs); call sdkOps instead", fset.Position(n.Pos()))
				}
			case *ast.Ident:
				if what, ok := forbidden[n.Name]; ok {
					t.Errorf("%s: names %s (%s); call sdkOps instead", fset.Position(n.Pos()), n.Name, what)
				}
			}
			return true
		})
	}
}
