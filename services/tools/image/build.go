package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// DefaultReference names the image in the archive.
	DefaultReference = "ghcr.io/tetherhq/tether:latest"
	// BinaryPath is where the image holds the tether binary.
	BinaryPath = "/usr/local/bin/tether"
	// UID and GID are the user tether's and its group's, which the image
	// runs as (65532, "nonroot", as distroless images have it).
	UID, GID = 65532, 65532
	// source is the repository the image is built from.
	source = "https://github.com/tetherhq/tether"
	// mainPackage is the tether binary's package, relative to the module.
	mainPackage = "./services/cmd/tether"
)

// Options say what to build and where to write it.
type Options struct {
	// ModuleDir is the directory of the tether module (its go.mod).
	ModuleDir string
	// Arch is the image's GOARCH; its OS is linux.
	Arch string
	// Output is the path of the archive to write.
	Output string
	// Reference is the image's name in the archive; default DefaultReference.
	Reference string
	// Version and Revision are the org.opencontainers.image.version and
	// .revision labels; an empty one is left out.
	Version, Revision string
	// Created is every timestamp in the image and the archive (zero: the
	// Unix epoch).
	Created time.Time
}

// Result describes the archive written.
type Result struct {
	// Digest is the image's manifest digest, as a registry would know it.
	Digest v1.Hash
	// Size is the archive's size in bytes.
	Size int64
}

// Build compiles the tether binary, assembles the image and writes it to
// opts.Output.
func Build(ctx context.Context, opts Options) (Result, error) {
	if opts.ModuleDir == "" || opts.Arch == "" || opts.Output == "" {
		return Result{}, errors.New("image: ModuleDir, Arch and Output are required")
	}
	if opts.Reference == "" {
		opts.Reference = DefaultReference
	}
	if opts.Created.IsZero() {
		opts.Created = time.Unix(0, 0).UTC()
	}
	tag, err := name.NewTag(opts.Reference, name.StrictValidation)
	if err != nil {
		return Result{}, fmt.Errorf("image: reference %q: %w", opts.Reference, err)
	}
	tmp, err := os.MkdirTemp("", "tether-image-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(tmp)
	binPath := filepath.Join(tmp, "tether")
	if err := Compile(ctx, opts.ModuleDir, opts.Arch, binPath); err != nil {
		return Result{}, err
	}
	binary, err := os.ReadFile(binPath)
	if err != nil {
		return Result{}, err
	}
	img, err := Assemble(binary, opts)
	if err != nil {
		return Result{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return Result{}, err
	}
	size, err := writeFileAtomically(opts.Output, func(w io.Writer) error {
		return WriteArchive(w, img, tag, opts.Created)
	})
	if err != nil {
		return Result{}, err
	}
	return Result{Digest: digest, Size: size}, nil
}

// Compile builds the static tether binary of the module in moduleDir for
// linux/arch into out.
func Compile(ctx context.Context, moduleDir, arch, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, mainPackage)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("image: go build %s for linux/%s: %w\n%s", mainPackage, arch, err, stderr.String())
	}
	return nil
}

// Assemble makes the image around a tether binary: the base files, the
// binary, and the configuration, every timestamp opts.Created.
func Assemble(binary []byte, opts Options) (v1.Image, error) {
	created := v1.Time{Time: opts.Created}
	base, err := tarLayer(baseFiles(), opts.Created)
	if err != nil {
		return nil, fmt.Errorf("image: base layer: %w", err)
	}
	bin, err := tarLayer([]file{
		{path: "usr/", mode: 0o755, dir: true},
		{path: "usr/local/", mode: 0o755, dir: true},
		{path: "usr/local/bin/", mode: 0o755, dir: true},
		{path: strings.TrimPrefix(BinaryPath, "/"), mode: 0o755, data: binary},
	}, opts.Created)
	if err != nil {
		return nil, fmt.Errorf("image: binary layer: %w", err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "tether image: /etc/passwd, /etc/group, /home/tether, /tmp"}},
		mutate.Addendum{Layer: bin, History: v1.History{Created: created, CreatedBy: "tether image: " + BinaryPath}},
	)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS, cfg.Created = opts.Arch, "linux", created
	if opts.Arch == "arm64" {
		cfg.Variant = "v8"
	}
	labels := map[string]string{
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.title":       "tether",
		"org.opencontainers.image.description": "Tether: an event-sourced control plane for game-server fleets",
	}
	if opts.Version != "" {
		labels["org.opencontainers.image.version"] = opts.Version
	}
	if opts.Revision != "" {
		labels["org.opencontainers.image.revision"] = opts.Revision
	}
	cfg.Config = v1.Config{
		Entrypoint: []string{BinaryPath},
		Cmd:        []string{"--help"},
		User:       fmt.Sprintf("%d:%d", UID, GID),
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/tether"},
		Labels:     labels,
		StopSignal: "SIGTERM",
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return img, nil
}

// baseFiles are what a non-root static binary expects to find: who it is
// (/etc/passwd, /etc/group), a home, and a /tmp anyone may write.
func baseFiles() []file {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n"+
		"tether:x:%d:%d:tether:/home/tether:/sbin/nologin\n"+
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n", UID, GID)
	group := fmt.Sprintf("root:x:0:\ntether:x:%d:\nnobody:x:65534:\n", GID)
	return []file{
		{path: "etc/", mode: 0o755, dir: true},
		{path: "etc/group", mode: 0o644, data: []byte(group)},
		{path: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{path: "home/", mode: 0o755, dir: true},
		{path: "home/tether/", mode: 0o700, dir: true, uid: UID, gid: GID},
		{path: "tmp/", mode: 0o1777, dir: true},
	}
}

// file is one entry of a layer.
type file struct {
	path     string // relative, "/"-terminated for a directory
	mode     int64  // permission bits, sticky bit included
	dir      bool
	data     []byte
	uid, gid int
}

// tarLayer makes an OCI layer of files, in their order, each with the
// modification time mtime.
func tarLayer(files []file, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name: f.path, Mode: f.mode, Uid: f.uid, Gid: f.gid,
			ModTime: mtime, Typeflag: tar.TypeReg, Size: int64(len(f.data)), Format: tar.FormatPAX,
		}
		if f.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", f.path, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("%s: %w", f.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layer)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// WriteArchive writes img as an OCI image layout in a tar stream (the
// files oci-layout, index.json and blobs/sha256/…), with the manifest.json
// of `docker save` beside it pointing at the same blobs: docker load reads
// the latter, OCI tools the former. Entries are in a fixed order and dated
// mtime, so one image always makes the same bytes.
func WriteArchive(w io.Writer, img v1.Image, tag name.Tag, mtime time.Time) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	mediaType, err := img.MediaType()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: mediaType, Size: int64(len(manifest)), Digest: digest,
			Annotations: map[string]string{
				// containerd and Docker name the image from the first,
				// podman, skopeo and buildah from the second.
				"io.containerd.image.name":          tag.Name(),
				"org.opencontainers.image.ref.name": tag.Name(),
			},
		}},
	})
	if err != nil {
		return err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	dockerManifest := []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{{Config: blob(configName), RepoTags: []string{tag.Name()}}}

	aw := archiveWriter{tw: tar.NewWriter(w), mtime: mtime}
	aw.dir("blobs/")
	aw.dir("blobs/sha256/")
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		aw.stream(blob(d), size, rc)
		if err := rc.Close(); err != nil {
			return err
		}
		dockerManifest[0].Layers = append(dockerManifest[0].Layers, blob(d))
	}
	aw.bytes(blob(configName), config)
	aw.bytes(blob(digest), manifest)
	aw.bytes("index.json", index)
	aw.bytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	dm, err := json.Marshal(dockerManifest)
	if err != nil {
		return err
	}
	aw.bytes("manifest.json", dm)
	if aw.err != nil {
		return aw.err
	}
	return aw.tw.Close()
}

// archiveWriter writes tar entries until the first error, which it keeps.
type archiveWriter struct {
	tw    *tar.Writer
	mtime time.Time
	err   error
}

func (a *archiveWriter) dir(name string) {
	if a.err == nil {
		a.err = a.tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: a.mtime, Format: tar.FormatPAX})
	}
}

func (a *archiveWriter) bytes(name string, data []byte) {
	a.stream(name, int64(len(data)), bytes.NewReader(data))
}

func (a *archiveWriter) stream(name string, size int64, r io.Reader) {
	if a.err != nil {
		return
	}
	if a.err = a.tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: a.mtime, Format: tar.FormatPAX}); a.err != nil {
		return
	}
	if _, err := io.Copy(a.tw, r); err != nil {
		a.err = fmt.Errorf("%s: %w", name, err)
	}
}

// writeFileAtomically writes path through write into a temporary file
// beside it, renamed over path once complete; it returns the size written.
func writeFileAtomically(path string, write func(io.Writer) error) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name()) // gone after the rename; left by a failure
	if err := write(f); err != nil {
		f.Close()
		return 0, fmt.Errorf("image: write %s: %w", path, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return 0, err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return 0, err
	}
	return info.Size(), nil
}

// moduleDir is the directory of the go.mod the go command finds from here.
func moduleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module: run it from the tether repository or give -module")
	}
	return filepath.Dir(gomod), nil
}

// git runs git in dir and returns its output, trimmed.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
