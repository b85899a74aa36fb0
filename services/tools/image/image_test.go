package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImage builds the image as `make image` does, reads the archive back
// the way docker load (manifest.json) and OCI tools (index.json) do, and
// runs the binary it holds.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: compiling tether for the image takes a while")
	}
	moduleDir, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "tether-image.tar")
	created := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	res, err := Build(t.Context(), Options{
		ModuleDir: moduleDir, Arch: runtime.GOARCH, Output: out,
		Version: "v9.9.9-test", Revision: "0123456789abcdef", Created: created,
	})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(out); err != nil || info.Size() != res.Size {
		t.Fatalf("archive %s: %v, size %d, want %d", out, err, info.Size(), res.Size)
	}
	tag, err := name.NewTag(DefaultReference)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("read the archive as docker load does: %v", err)
	}
	// docker load's view rebuilds the manifest (its digest differs); the
	// config, which names the layers, is the same blob in both views.
	oci := readOCILayout(t, out, res.Digest)
	dockerConfig, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	ociConfig, err := oci.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if dockerConfig != ociConfig {
		t.Errorf("manifest.json names config %s, index.json's manifest %s", dockerConfig, ociConfig)
	}

	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{BinaryPath}) {
		t.Errorf("Entrypoint %q, want [%s]", cfg.Config.Entrypoint, BinaryPath)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("User %q, want 65532:65532 (non-root)", cfg.Config.User)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cfg.OS, cfg.Architecture, runtime.GOARCH)
	}
	if !cfg.Created.Equal(created) {
		t.Errorf("created %v, want %v", cfg.Created, created)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   source,
		"org.opencontainers.image.version":  "v9.9.9-test",
		"org.opencontainers.image.revision": "0123456789abcdef",
	} {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}

	files := readFiles(t, img)
	bin, ok := files[BinaryPath]
	if !ok {
		t.Fatalf("no %s in the image; it has %v", BinaryPath, keys(files))
	}
	if bin.header.Mode&0o111 == 0 || bin.header.Uid != 0 {
		t.Errorf("%s: mode %o, uid %d: want executable, owned by root", BinaryPath, bin.header.Mode, bin.header.Uid)
	}
	if tmp := files["/tmp"]; tmp.header == nil || tmp.header.Typeflag != tar.TypeDir || tmp.header.Mode&0o7777 != 0o1777 {
		t.Errorf("/tmp: %+v, want a directory of mode 1777", tmp.header)
	}
	if home := files["/home/tether"]; home.header == nil || home.header.Uid != UID || home.header.Gid != GID {
		t.Errorf("/home/tether: %+v, want a directory owned by %d:%d", home.header, UID, GID)
	}
	if !strings.Contains(string(files["/etc/passwd"].data), "tether:x:65532:65532:") {
		t.Errorf("/etc/passwd has no user tether 65532:\n%s", files["/etc/passwd"].data)
	}
	if !strings.Contains(string(files["/etc/group"].data), "tether:x:65532:") {
		t.Errorf("/etc/group has no group tether 65532:\n%s", files["/etc/group"].data)
	}
	for _, h := range files {
		if !h.header.ModTime.Equal(created) {
			t.Errorf("%s: mtime %v, want %v (reproducible)", h.header.Name, h.header.ModTime, created)
		}
	}

	exe := filepath.Join(t.TempDir(), "tether")
	if err := os.WriteFile(exe, bin.data, 0o755); err != nil {
		t.Fatal(err)
	}
	checkStatic(t, exe)
	help, err := exec.CommandContext(t.Context(), exe, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("tether --help from the image: %v\n%s", err, help)
	}
	for _, cmd := range []string{"apiserver", "projector", "controller", "migrate", "agent"} {
		if !strings.Contains(string(help), cmd) {
			t.Errorf("tether --help does not list %s:\n%s", cmd, help)
		}
	}

	// The same binary and options make the same bytes.
	again, err := Assemble(bin.data, Options{Arch: runtime.GOARCH, Version: "v9.9.9-test", Revision: "0123456789abcdef", Created: created})
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := WriteArchive(&a, again, tag, created); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(&b, again, tag, created); err != nil {
		t.Fatal(err)
	}
	if d, err := again.Digest(); err != nil || d != res.Digest {
		t.Errorf("assembling the same binary again gave digest %s (%v), want %s", d, err, res.Digest)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two archives of one image differ")
	}
}

// readOCILayout unpacks the archive, reads it as an OCI image layout and
// returns its one image, whose manifest digest must be want.
func readOCILayout(t *testing.T, archive string, want v1.Hash) v1.Image {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(to, dir+string(filepath.Separator)) {
			t.Fatalf("archive entry %q escapes the archive", h.Name)
		}
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(to, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("read the archive as an OCI image layout: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Digest != want {
		t.Fatalf("index.json: %+v, want one manifest %s", im.Manifests, want)
	}
	if got := im.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != DefaultReference {
		t.Errorf("index.json ref.name %q, want %q", got, DefaultReference)
	}
	img, err := idx.Image(want)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("OCI layout: %d layers (%v), want 2", len(layers), err)
	}
	return img
}

// entry is one file of the image's filesystem.
type entry struct {
	header *tar.Header
	data   []byte
}

// readFiles flattens the image's layers into its filesystem, by absolute
// path without a trailing slash.
func readFiles(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files["/"+strings.TrimSuffix(h.Name, "/")] = entry{header: h, data: data}
	}
}

// checkStatic fails unless path is an ELF executable with no interpreter
// and no shared library: it runs in an image that has neither.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s is not ELF: %v", path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		t.Errorf("ELF type %v, want an executable", f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an interpreter (PT_INTERP): it is dynamically linked")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) != 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
}

func keys(m map[string]entry) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestSourceDateEpoch(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"", time.Unix(0, 0), false},
		{"1795000000", time.Unix(1795000000, 0), false},
		{"yesterday", time.Time{}, true},
	} {
		got, err := sourceDateEpoch(tc.in)
		if (err != nil) != tc.err || !got.Equal(tc.want) {
			t.Errorf("sourceDateEpoch(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestBuildNeedsItsOptions(t *testing.T) {
	if _, err := Build(t.Context(), Options{Arch: "amd64", Output: "x.tar"}); err == nil {
		t.Error("Build without ModuleDir succeeded")
	}
	dir := t.TempDir()
	_, err := Build(t.Context(), Options{ModuleDir: dir, Arch: "amd64", Output: filepath.Join(dir, "x.tar"), Reference: "Not A Reference"})
	if err == nil || !strings.Contains(err.Error(), "reference") {
		t.Errorf("Build with a bad reference: %v, want an error about it", err)
	}
}
