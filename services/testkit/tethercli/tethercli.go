// Package tethercli reads what the tether binary accepts (its
// subcommands and their flags) from its source, for tests that check
// deployment files (Kubernetes manifests, systemd units) name only
// subcommands and flags that exist.
package tethercli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// CLI is what the tether binary accepts, read from its source
// (services/cmd/tether): each subcommand's flags, and the root's, which
// every subcommand has.
type CLI struct {
	Global map[string]bool            // the root's persistent flags
	Flags  map[string]map[string]bool // subcommand → its own flags
}

// Read parses the non-test Go files of services/cmd/tether: every
// function that builds a cobra.Command with a Use: literal owns the flags
// defined in it (f.StringVar(&x, "name", …), f.Bool("name", …)); the
// command "tether" is the root.
func Read(t testing.TB, dir string) CLI {
	t.Helper()
	fset := token.NewFileSet()
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	cli := CLI{Global: map[string]bool{}, Flags: map[string]map[string]bool{}}
	for _, path := range matches {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", path, err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			use, flags := commandIn(fn.Body)
			switch use {
			case "":
			case "tether":
				for name := range flags {
					cli.Global[name] = true
				}
			default:
				cli.Flags[use] = flags
			}
		}
	}
	if len(cli.Flags) == 0 || len(cli.Global) == 0 {
		t.Fatalf("found no cobra commands or no root flags in %s: has the way tether builds its commands changed?", dir)
	}
	return cli
}

// commandIn returns the first word of the Use: of the cobra.Command built
// in body, if any, and the names of the flags body defines.
func commandIn(body *ast.BlockStmt) (string, map[string]bool) {
	use, flags := "", map[string]bool{}
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok && id.Name == "Use" && use == "" {
				if s, ok := stringLit(n.Value); ok {
					use, _, _ = strings.Cut(s, " ")
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			// pflag: XxxVar(&v, "name", …) and XxxVarP; Xxx("name", …) and XxxP.
			method, pos := sel.Sel.Name, 0
			if strings.HasSuffix(method, "Var") || strings.HasSuffix(method, "VarP") {
				pos = 1
			}
			if !isFlagMethod(method) || len(n.Args) <= pos {
				return true
			}
			if name, ok := stringLit(n.Args[pos]); ok {
				flags[name] = true
			}
		}
		return true
	})
	return use, flags
}

// isFlagMethod reports whether a method name is one of pflag.FlagSet's
// flag definers (StringVar, IntVar, DurationVar, StringToStringVar, …).
func isFlagMethod(name string) bool {
	base := strings.TrimSuffix(strings.TrimSuffix(name, "P"), "Var")
	switch base {
	case "String", "Bool", "Int", "Int32", "Int64", "Uint", "Uint32", "Uint64", "Float64",
		"Duration", "StringSlice", "StringArray", "StringToString", "IntSlice", "DurationSlice":
		return true
	}
	return false
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// HasFlag reports whether subcommand cmd takes --name.
func (c CLI) HasFlag(cmd, name string) bool {
	return c.Global[name] || c.Flags[cmd][name]
}

// FlagOfEnv is the flag a TETHER_ variable sets (TETHER_LOG_LEVEL:
// log-level), as services/cmd/tether/env.go reads them.
func FlagOfEnv(env string) (string, bool) {
	rest, ok := strings.CutPrefix(env, "TETHER_")
	if !ok {
		return "", false
	}
	return strings.ToLower(strings.ReplaceAll(rest, "_", "-")), true
}

// CheckArgs fails for a subcommand tether does not have, or a flag that
// subcommand does not take, in args (args[0] is the subcommand).
func (c CLI) CheckArgs(t testing.TB, where string, args []string) {
	t.Helper()
	if len(args) == 0 {
		t.Errorf("%s: no args: which tether subcommand?", where)
		return
	}
	cmd := args[0]
	if _, ok := c.Flags[cmd]; !ok {
		t.Errorf("%s: tether has no subcommand %q", where, cmd)
		return
	}
	for _, a := range args[1:] {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if !c.HasFlag(cmd, name) {
			t.Errorf("%s: tether %s has no flag --%s", where, cmd, name)
		}
	}
}
