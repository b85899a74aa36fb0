// Command image builds Tether's container image without a container
// runtime: `make image` writes bin/tether-image.tar.
//
// It compiles a static tether binary (CGO_ENABLED=0, -trimpath,
// -ldflags "-s -w") for linux and the chosen architecture, and assembles
// with go-containerregistry an image of two layers: the few files a
// non-root process needs (/etc/passwd and /etc/group with the user tether,
// uid and gid 65532; its home; /tmp, mode 1777), then the binary at
// /usr/local/bin/tether. The image runs as 65532:65532 with the
// entrypoint /usr/local/bin/tether and `--help` as its default arguments
// (give a subcommand: `apiserver`, `migrate`, …), and carries the
// org.opencontainers.image labels source, version and revision from git.
//
// The archive is an OCI image layout (oci-layout, index.json, blobs/) that
// also has the manifest.json of `docker save`, as Docker 25 and later
// write it, so every usual loader reads it:
//
//	docker load -i bin/tether-image.tar
//	podman load -i bin/tether-image.tar
//	skopeo copy oci-archive:bin/tether-image.tar docker://registry/tether:tag
//	crane push bin/tether-image.tar registry/tether:tag
//
// The build is reproducible: every timestamp is SOURCE_DATE_EPOCH (the
// Unix epoch when unset), files are owned by root (the home by tether) and
// written in a fixed order, so one commit and one Go toolchain give one
// image digest.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	opts := Options{}
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.StringVar(&opts.Output, "o", "bin/tether-image.tar", "write the image archive here")
	fs.StringVar(&opts.Arch, "arch", runtime.GOARCH, "GOARCH of the image (its OS is linux)")
	fs.StringVar(&opts.Reference, "ref", DefaultReference, "the image's name and tag in the archive")
	fs.StringVar(&opts.Version, "version", "", "org.opencontainers.image.version (default: git describe --tags --always --dirty)")
	fs.StringVar(&opts.Revision, "revision", "", "org.opencontainers.image.revision (default: git rev-parse HEAD)")
	fs.StringVar(&opts.ModuleDir, "module", "", "the tether module's directory (default: the go.mod `go env GOMOD` finds)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	created, err := sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return err
	}
	opts.Created = created
	if opts.ModuleDir == "" {
		if opts.ModuleDir, err = moduleDir(ctx); err != nil {
			return err
		}
	}
	if opts.Version == "" {
		if opts.Version, err = git(ctx, opts.ModuleDir, "describe", "--tags", "--always", "--dirty"); err != nil {
			fmt.Fprintf(os.Stderr, "image: no version label (%v); set one with -version\n", err)
		}
	}
	if opts.Revision == "" {
		if opts.Revision, err = git(ctx, opts.ModuleDir, "rev-parse", "HEAD"); err != nil {
			fmt.Fprintf(os.Stderr, "image: no revision label (%v); set one with -revision\n", err)
		}
	}
	res, err := Build(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s (linux/%s, %d bytes), %s\n", opts.Output, opts.Reference, opts.Arch, res.Size, res.Digest)
	return nil
}

// sourceDateEpoch is the time SOURCE_DATE_EPOCH (seconds since the Unix
// epoch) names, or the epoch itself when it is unset.
func sourceDateEpoch(v string) (time.Time, error) {
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	secs, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: not a number of seconds: %w", v, err)
	}
	return time.Unix(secs, 0).UTC(), nil
}
