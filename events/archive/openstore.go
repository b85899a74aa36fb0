package archive

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// schemeRE matches the start of a URL with a scheme, as against a path.
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// OpenStore returns the segment store at location, as the command lines
// take it:
//
//   - a directory path, or file:///path: Dir, created if needed;
//   - s3://bucket/prefix?endpoint=...&region=...&ca=...: S3, in bucket,
//     keys under prefix (optional). The parameters are optional:
//     endpoint is host[:port] (HTTPS) or http(s)://host[:port], default
//     Amazon S3; region the bucket's region, default asked of the server;
//     ca a PEM file of certificate authorities trusted besides the
//     system's.
//
// Credentials never go in the location: S3 takes them from the
// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN), the shared credentials file (AWS_PROFILE), or the
// container, web identity or instance role (NewS3).
func OpenStore(ctx context.Context, location string) (SegmentStore, error) {
	if location == "" {
		return nil, errors.New("archive: no archive store")
	}
	if !schemeRE.MatchString(location) && !strings.HasPrefix(location, "file:") {
		return NewDir(location)
	}
	u, err := url.Parse(location)
	if err != nil {
		return nil, fmt.Errorf("archive: store location: %w", err)
	}
	switch strings.ToLower(u.Scheme) {
	case "file":
		dir, err := fileURLPath(u)
		if err != nil {
			return nil, err
		}
		return NewDir(dir)
	case "s3":
		opts, err := s3URLOptions(u)
		if err != nil {
			return nil, err
		}
		return NewS3(ctx, opts)
	}
	return nil, fmt.Errorf("archive: store location %s: scheme %q: want a directory, file:///path or s3://bucket/prefix", redact(u), u.Scheme)
}

// fileURLPath returns the directory of a file URL: file:///path or
// file://localhost/path.
func fileURLPath(u *url.URL) (string, error) {
	switch {
	case u.Opaque != "" || !strings.HasPrefix(u.Path, "/"):
		return "", fmt.Errorf("archive: store location %s: want file:///absolute/path", redact(u))
	case u.Host != "" && u.Host != "localhost":
		return "", fmt.Errorf("archive: store location %s: host %q: a file URL names a local directory (file:///path)", redact(u), u.Host)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("archive: store location %s: want file:///path, without user, query or fragment", redact(u))
	}
	return u.Path, nil
}

// s3URLOptions returns the options of an s3:// location.
func s3URLOptions(u *url.URL) (S3Options, error) {
	switch {
	case u.User != nil:
		return S3Options{}, fmt.Errorf("archive: store location %s: credentials do not go in the URL: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), or use a profile or a role", redact(u))
	case u.Host == "":
		return S3Options{}, fmt.Errorf("archive: store location %s: no bucket: want s3://bucket/prefix", redact(u))
	case u.Port() != "":
		return S3Options{}, fmt.Errorf("archive: store location %s: s3://bucket takes no port: set the server with ?endpoint=host:port", redact(u))
	case u.Fragment != "":
		return S3Options{}, fmt.Errorf("archive: store location %s: no fragment (#) is taken", redact(u))
	}
	opts := S3Options{Bucket: u.Host, Prefix: strings.TrimPrefix(u.Path, "/")}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return S3Options{}, fmt.Errorf("archive: store location %s: query: %w", redact(u), err)
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return S3Options{}, fmt.Errorf("archive: store location %s: %s given %d times", redact(u), k, len(vs))
		}
		switch v := vs[0]; k {
		case "endpoint":
			opts.Endpoint = v
		case "region":
			opts.Region = v
		case "ca":
			opts.CAFile = v
		default:
			hint := ""
			if k == "insecure" || k == "tls" || k == "secure" {
				hint = " (for plain HTTP, write endpoint=http://host:port)"
			}
			return S3Options{}, fmt.Errorf("archive: store location %s: unknown parameter %q%s: want endpoint, region or ca", redact(u), k, hint)
		}
	}
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return S3Options{}, err
	}
	return opts, nil
}

// redact returns u for an error message: without user, password or
// query, where a secret put there against the rules would be.
func redact(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = nil, "", false, "", ""
	return c.String()
}
