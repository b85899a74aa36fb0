package console_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/services/console"
)

// serve answers one request through the console's handler.
func serve(t *testing.T, method, path string, header http.Header) answer {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	console.Handler().ServeHTTP(rec, req)
	return answer{StatusCode: rec.Code, Header: rec.Header(), Body: rec.Body}
}

// answer is what the handler answered.
type answer struct {
	StatusCode int
	Header     http.Header
	Body       *bytes.Buffer
}

// Every file is served with its content type, a strict CSP and caching
// that revalidates; index.html is the answer at the root.
func TestFilesAreServedWithTypeCSPAndCaching(t *testing.T) {
	want := map[string]string{
		"/ui/":           "text/html; charset=utf-8",
		"/ui/index.html": "text/html; charset=utf-8",
		"/ui/app.js":     "text/javascript; charset=utf-8",
		"/ui/style.css":  "text/css; charset=utf-8",
		"/ui/icon.svg":   "image/svg+xml",
	}
	for _, f := range console.Files() {
		if strings.HasSuffix(f, ".js") {
			want["/ui/"+f] = "text/javascript; charset=utf-8"
		}
	}
	for path, ct := range want {
		t.Run(path, func(t *testing.T) {
			resp := serve(t, "GET", path, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if got := resp.Header.Get("Content-Type"); got != ct {
				t.Errorf("Content-Type %q, want %q", got, ct)
			}
			csp := resp.Header.Get("Content-Security-Policy")
			for _, directive := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
				if !strings.Contains(csp, directive) {
					t.Errorf("CSP %q lacks %q", csp, directive)
				}
			}
			if strings.Contains(csp, "unsafe-") {
				t.Errorf("CSP %q allows something unsafe", csp)
			}
			if got := resp.Header.Get("Cache-Control"); got != "no-cache" {
				t.Errorf("Cache-Control %q, want no-cache", got)
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Error("no X-Content-Type-Options: nosniff")
			}
			etag := resp.Header.Get("ETag")
			if etag == "" {
				t.Fatal("no ETag")
			}
			again := serve(t, "GET", path, http.Header{"If-None-Match": {etag}})
			if again.StatusCode != http.StatusNotModified {
				t.Errorf("If-None-Match with its ETag: status %d, want 304", again.StatusCode)
			}
		})
	}
}

func TestRedirectsAndRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, method, path string
		status             int
		location           string
	}{
		{"without the slash", "GET", "/ui", http.StatusMovedPermanently, "/ui/"},
		{"an unknown file", "GET", "/ui/nope.js", http.StatusNotFound, ""},
		{"a directory", "GET", "/ui/pages/", http.StatusNotFound, ""},
		{"a path outside", "GET", "/uix", http.StatusNotFound, ""},
		{"a write", "POST", "/ui/", http.StatusMethodNotAllowed, ""},
		{"HEAD", "HEAD", "/ui/app.js", http.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := serve(t, tc.method, tc.path, nil)
			if resp.StatusCode != tc.status {
				t.Fatalf("%s %s: status %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
			}
			if got := resp.Header.Get("Location"); got != tc.location {
				t.Errorf("Location %q, want %q", got, tc.location)
			}
		})
	}
}

var (
	// htmlRefs finds the files index.html loads: src= and href= that are
	// not routes (#/…) or other sites.
	htmlRefs = regexp.MustCompile(`(?:src|href)="([^"#:]+)"`)
	// jsImports finds a module's static imports.
	jsImports = regexp.MustCompile(`(?m)^import\s[^'"]*['"]([^'"]+)['"]`)
	// inlineScript finds a script element with content (CSP refuses it).
	inlineScript = regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]+</script>`)
)

// Every file index.html loads, and every module a module imports, is in
// the binary; index.html has no inline script or style for the CSP to
// refuse.
func TestEveryReferencedFileExists(t *testing.T) {
	files := console.Files()
	read := func(name string) string {
		t.Helper()
		resp := serve(t, "GET", "/ui/"+name, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", name, resp.StatusCode)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	index := read("index.html")
	refs := htmlRefs.FindAllStringSubmatch(index, -1)
	if len(refs) < 3 {
		t.Fatalf("index.html references %d files; expected the script, the stylesheet and the icon", len(refs))
	}
	for _, m := range refs {
		if !slices.Contains(files, m[1]) {
			t.Errorf("index.html references %s, which is not embedded", m[1])
		}
	}
	if inlineScript.MatchString(index) || strings.Contains(index, "<style") || strings.Contains(index, " style=") {
		t.Error("index.html has an inline script or style, which the CSP refuses")
	}
	imported := 0
	for _, f := range files {
		if !strings.HasSuffix(f, ".js") {
			continue
		}
		src := read(f)
		dir := f[:strings.LastIndex(f, "/")+1]
		for _, m := range jsImports.FindAllStringSubmatch(src, -1) {
			target := resolve(dir, m[1])
			if !slices.Contains(files, target) {
				t.Errorf("%s imports %s (%s), which is not embedded", f, m[1], target)
			}
			imported++
		}
		if strings.Contains(src, "innerHTML") || strings.Contains(src, "eval(") {
			t.Errorf("%s builds markup from strings (innerHTML, eval): use dom.js's h()", f)
		}
	}
	if imported == 0 {
		t.Error("no imports found: the pattern no longer matches the modules")
	}
}

// resolve joins a relative import to the importing module's directory.
func resolve(dir, rel string) string {
	parts := strings.Split(strings.TrimSuffix(dir, "/"), "/")
	if dir == "" {
		parts = nil
	}
	for seg := range strings.SplitSeq(rel, "/") {
		switch seg {
		case ".":
		case "..":
			if len(parts) > 0 {
				parts = parts[:len(parts)-1]
			}
		default:
			parts = append(parts, seg)
		}
	}
	return strings.Join(parts, "/")
}
