// Package docs holds the repository's documents, and tests that keep them
// and the folder READMEs true to the tree: no file points to a document the
// repository does not have, and every package is listed, with its job, in
// the README of the folder it is in.
package docs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// outsideDesign is the name of a design document that lived outside the
// repository. docs/architecture.md is the design; a file that names the
// other one points a reader to something no clone has. It is spelled in two
// pieces so that this file does not name it.
const outsideDesign = "DESIGN" + ".md"

// TestNoFileNamesTheOutsideDesign fails for every tracked file, binary
// files included, that mentions outsideDesign, naming the file and line.
func TestNoFileNamesTheOutsideDesign(t *testing.T) {
	root := repoRoot(t)
	files := trackedFiles(t, root)
	needle := []byte(outsideDesign)
	for _, name := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, needle) {
			continue
		}
		if bytes.IndexByte(data, 0) >= 0 {
			t.Errorf("%s: the binary file names %s %d times, first at byte %d; rebuild it without that text",
				name, outsideDesign, bytes.Count(data, needle), bytes.Index(data, needle))
			continue
		}
		for i, line := range bytes.Split(data, []byte("\n")) {
			if !bytes.Contains(line, needle) {
				continue
			}
			t.Errorf("%s:%d: names %s, which no clone has; point to docs/ instead: %s",
				name, i+1, outsideDesign, strings.TrimSpace(string(line)))
		}
	}
}

// TestFolderREADMEsListTheirPackages fails for every Go package that the
// README of its folder does not name. A package's folder README is the
// README.md nearest above its directory (the repository's own README.md for
// a package in no folder with one); a package whose directory has a
// README.md of its own is described there. The README names the package by
// its path from the README's directory, in backquotes (`dev/pgtemp`, or
// `events/` at the top) or as a link's target, on the line that says its
// job. A folder with a
// README of its own is named in the README above it (`nats/`). It also
// fails for a list item "- `name`: …" naming a directory that does not
// exist.
func TestFolderREADMEsListTheirPackages(t *testing.T) {
	root := repoRoot(t)
	files := trackedFiles(t, root)

	readmes := map[string]bool{} // directories with a README.md
	packages := map[string]bool{}
	for _, name := range files {
		if !inGoTree(name) {
			continue
		}
		dir := path.Dir(name)
		switch {
		case path.Base(name) == "README.md":
			readmes[dir] = true
		case strings.HasSuffix(name, ".go"):
			packages[dir] = true
		}
	}

	named := map[string]map[string]bool{} // README directory → names in backquotes
	for dir := range readmes {
		file := path.Join(dir, "README.md")
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		named[dir] = backquoted(string(data))
		for i, line := range strings.Split(string(data), "\n") {
			m := listItem.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			item := strings.TrimSuffix(m[1], "/")
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(path.Join(dir, item)))); err != nil {
				t.Errorf("%s:%d: lists %q, which is not a directory of %s/", file, i+1, item, dir)
			}
		}
	}

	// A folder with a README of its own is named in the README above it,
	// which leaves its packages to it.
	var below []string
	for dir := range readmes {
		if dir != "." {
			below = append(below, dir)
		}
	}
	sort.Strings(below)
	for _, dir := range below {
		owner := readmeAbove(dir, readmes)
		rel := dir
		if owner != "." {
			rel = strings.TrimPrefix(dir, owner+"/")
		}
		if !named[owner][rel] {
			t.Errorf("%s does not name the folder %s, which has a README of its own: add a line naming `%s/` and saying what it holds",
				path.Join(owner, "README.md"), dir, rel)
		}
	}

	var dirs []string
	for dir := range packages {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		if readmes[dir] {
			continue
		}
		owner := readmeAbove(dir, readmes)
		rel := dir
		if owner != "." {
			rel = strings.TrimPrefix(dir, owner+"/")
		}
		if named[owner][rel] {
			continue
		}
		t.Errorf("%s does not list the package %s: add a line naming `%s` and saying its job (its doc comment has it)",
			path.Join(owner, "README.md"), dir, rel)
	}
}

// listItem matches a README's list item that names a directory: "- `sim`: …".
var listItem = regexp.MustCompile("^- `([A-Za-z0-9_./-]+)`:")

var (
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	link     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

// backquoted returns the code spans of a Markdown text, each without a
// trailing slash, and the targets of its links, each without a trailing
// "/README.md" or slash.
func backquoted(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		out[strings.TrimSuffix(strings.TrimSpace(m[1]), "/")] = true
	}
	for _, m := range link.FindAllStringSubmatch(text, -1) {
		target := strings.TrimSuffix(strings.TrimSuffix(m[1], "README.md"), "/")
		out[strings.TrimPrefix(target, "./")] = true
	}
	return out
}

// readmeAbove returns the nearest directory above dir that has a README.md,
// "." at the top.
func readmeAbove(dir string, readmes map[string]bool) string {
	for dir != "." {
		dir = path.Dir(dir)
		if readmes[dir] {
			return dir
		}
	}
	return "."
}

// inGoTree reports whether go build would see a file at this path: none of
// its directories is testdata or begins with "." or "_".
func inGoTree(name string) bool {
	parts := strings.Split(name, "/")
	return !slices.ContainsFunc(parts[:len(parts)-1], func(p string) bool {
		return p == "testdata" || strings.HasPrefix(p, ".") || strings.HasPrefix(p, "_")
	})
}

// repoRoot is the repository's top directory: this package's parent.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod above docs/: %v", err)
	}
	return root
}

// trackedFiles lists the repository's files, slash-separated and relative
// to root: git's index, or, without git, every file of the tree but .git,
// the installed tools (.tools) and the built binaries (bin).
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ".git" || rel == ".tools" || rel == "bin" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		files = append(files, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// checklists are the files of docs/contributing, one per kind of change.
var checklists = []string{
	"add-an-aggregate.md", "add-an-rpc.md", "add-a-planner-step.md", "add-an-sdk-call.md", "add-a-metric.md",
	"add-a-dependency.md",
}

// repoPath is a path into the repository as the checklists write it.
var repoPath = regexp.MustCompile(`\b(?:docs|services|events|projections|proto|migrations|deploy|sdk)/[A-Za-z0-9_./-]*[A-Za-z0-9_]`)

// testName is a test function's name in a code span.
var testName = regexp.MustCompile("^Test[A-Z][A-Za-z0-9_]*$")

// TestChecklistsNameWhatExists keeps docs/contributing true to the tree:
// each checklist is there and listed in its README, every file or
// directory a checklist names exists, and every test it names is a test
// function of the repository.
func TestChecklistsNameWhatExists(t *testing.T) {
	root := repoRoot(t)
	index, err := os.ReadFile(filepath.Join(root, "docs", "contributing", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var tests map[string]bool
	for _, name := range checklists {
		if !bytes.Contains(index, []byte("("+name+")")) {
			t.Errorf("docs/contributing/README.md does not link %s", name)
		}
		raw, err := os.ReadFile(filepath.Join(root, "docs", "contributing", name))
		if err != nil {
			t.Errorf("checklist %s: %v", name, err)
			continue
		}
		for i, line := range strings.Split(string(raw), "\n") {
			for _, p := range repoPath.FindAllString(line, -1) {
				p = strings.TrimSuffix(p, ".")
				if strings.HasSuffix(p, "/<kind>.go") {
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
					t.Errorf("docs/contributing/%s:%d names %s, which the tree does not have", name, i+1, p)
				}
			}
		}
		for span := range backquoted(string(raw)) {
			if !testName.MatchString(span) {
				continue
			}
			if tests == nil {
				tests = testFunctions(t, root)
			}
			if !tests[span] {
				t.Errorf("docs/contributing/%s names the test %s, which no _test.go file declares", name, span)
			}
		}
	}
}

// testFunctions returns the names of the repository's test functions.
func testFunctions(t *testing.T, root string) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]*)\(`)
	out := map[string]bool{}
	for _, f := range trackedFiles(t, root) {
		if !strings.HasSuffix(f, "_test.go") {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllSubmatch(raw, -1) {
			out[string(m[1])] = true
		}
	}
	return out
}
