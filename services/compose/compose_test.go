package compose_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// module is the repository's module path; the test runs in
// services/compose, two levels below its root.
const (
	module = "github.com/tetherhq/tether"
	root   = "../.."
)

// constructors are the components' constructors, by import path: what
// only this package calls outside tests.
var constructors = map[string][]string{
	module + "/services/apiserver":   {"New"},
	module + "/services/controller":  {"New"},
	module + "/services/projector":   {"New"},
	module + "/services/agent":       {"New"},
	module + "/services/archiver":    {"New"},
	module + "/projections/postgres": {"NewProjector"},
}

// allowed are the packages, besides compose, that may call one: the
// projector service is built around the projector it leads with.
var allowed = map[string]string{
	module + "/services/projector": module + "/projections/postgres.NewProjector",
}

// TestOnlyComposeConstructsComponents keeps compose the composition root:
// no code outside it and its tests (main, dev, the test stack, the
// simulator, a tool) builds a component with the component's own
// constructor, so a dependency a component gains is wired here alone.
// A component's own package and tests may build it.
func TestOnlyComposeConstructsComponents(t *testing.T) {
	fset := token.NewFileSet()
	var found []string
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "testdata", "node_modules", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := module + "/" + filepath.ToSlash(rel)
		if pkg == module+"/services/compose" {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		found = append(found, constructorCalls(fset, f, pkg)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d Go files checked from %s: the walk missed the repository", checked, root)
	}
	for _, f := range found {
		t.Errorf("%s: build the component with services/compose instead", f)
	}
	// The check sees a call when there is one: compose's own files call
	// every constructor.
	var own []string
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		own = append(own, constructorCalls(fset, f, module+"/services/compose")...)
	}
	want := 0
	for _, names := range constructors {
		want += len(names)
	}
	if len(own) < want {
		t.Errorf("compose's files call %d component constructors, want all %d:\n%s", len(own), want, strings.Join(own, "\n"))
	}
}

// constructorCalls lists the calls of f, in package pkg, to a component's
// constructor that pkg may not make.
func constructorCalls(fset *token.FileSet, f *ast.File, pkg string) []string {
	names := map[string]string{} // local name -> import path, of the components f imports
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil || constructors[path] == nil || path == pkg {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = path
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok || names[x.Name] == "" {
			return true
		}
		path := names[x.Name]
		for _, c := range constructors[path] {
			if sel.Sel.Name == c && allowed[pkg] != path+"."+c {
				out = append(out, fset.Position(call.Pos()).String()+": "+path+"."+c)
			}
		}
		return true
	})
	return out
}
