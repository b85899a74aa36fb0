// Package console serves the operator web console: plain HTML, CSS and
// JavaScript modules embedded in the binary (web/), with no build step.
// The console calls the REST API from the browser, with the API key its
// user signs in with; serving the console itself needs no key.
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
)

// Path is where the console is served; Handler also answers Path without
// its trailing slash, with a redirect to Path.
const Path = "/ui/"

// ContentSecurityPolicy is sent with every file of the console: scripts,
// styles and data only from the API's own origin, no inline script or
// style, no framing.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// CacheControl is sent with every file: the files have no version in
// their names, so a browser keeps them but asks again (If-None-Match) each
// time, and a new binary's console is seen at once.
const CacheControl = "no-cache"

//go:embed web
var web embed.FS

// contentTypes are the types of the files the console is made of; a file
// of another kind is not served.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// file is one embedded file, ready to serve.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// Files returns the paths of the console's files, relative to web/ (for
// tests and checks).
func Files() []string {
	var out []string
	_ = fs.WalkDir(web, "web", func(p string, d fs.DirEntry, err error) error { // an embedded tree has no walk errors
		if err == nil && !d.IsDir() {
			out = append(out, strings.TrimPrefix(p, "web/"))
		}
		return nil
	})
	return out
}

// Handler serves the console at Path, and redirects Path without its
// trailing slash to Path. It serves GET and HEAD only.
func Handler() http.Handler {
	files := map[string]file{}
	for _, name := range Files() {
		ct, ok := contentTypes[path.Ext(name)]
		if !ok {
			continue
		}
		body, err := web.ReadFile("web/" + name)
		if err != nil {
			panic("console: embedded file " + name + ": " + err.Error()) // listed by Files, so always there
		}
		sum := sha256.Sum256(body)
		files[name] = file{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == strings.TrimSuffix(Path, "/") {
			http.Redirect(w, r, Path, http.StatusMovedPermanently)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, Path)
		if !ok {
			http.NotFound(w, r)
			return
		}
		if name == "" {
			name = "index.html"
		}
		f, ok := files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", CacheControl)
		h.Set("ETag", f.etag)
		if match := r.Header.Get("If-None-Match"); match != "" && etagMatches(match, f.etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.Set("Content-Type", f.contentType)
		h.Set("Content-Length", strconv.Itoa(len(f.body)))
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(f.body) // a failed write means the browser went away
	})
}

// etagMatches reports whether an If-None-Match header names etag (or is *).
func etagMatches(header, etag string) bool {
	for tag := range strings.SplitSeq(header, ",") {
		tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
		if tag == "*" || tag == etag {
			return true
		}
	}
	return false
}
