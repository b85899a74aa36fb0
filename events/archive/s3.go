package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// Defaults of S3Options.
const (
	// DefaultS3Endpoint is Amazon S3's endpoint.
	DefaultS3Endpoint = "s3.amazonaws.com"
	// DefaultS3ReadTimeout bounds one ranged read of an opened segment.
	DefaultS3ReadTimeout = time.Minute
)

// s3CheckTimeout bounds NewS3's check of the bucket.
const s3CheckTimeout = 30 * time.Second

// MaxS3SegmentSize bounds a segment S3 stores: Amazon S3's limit of a
// single PUT (5 GiB). Put uploads in one request, the one that If-None-Match
// guards; segments are far smaller.
const MaxS3SegmentSize = 5 << 30

// s3SumKey is the user metadata (x-amz-meta-tether-sha256) in which S3
// records a segment's SHA-256, in hex, to compare a Put with what is
// stored without reading it.
const s3SumKey = "Tether-Sha256"

// s3SpoolPattern names the temporary files Put copies a segment into
// before uploading it.
const s3SpoolPattern = "tether-segment-*"

// S3Options configure an S3 store.
type S3Options struct {
	// Endpoint is the server: host or host:port for HTTPS, or a URL,
	// https://host:port or http://host:port (plain HTTP, for a local
	// MinIO or a test server). Default DefaultS3Endpoint.
	Endpoint string
	// Bucket holds the segments (required). It must exist: NewS3 does not
	// create it.
	Bucket string
	// Prefix, when set, starts the key of every segment: segment name
	// becomes the key Prefix/name (a '/' is added if Prefix does not end
	// with one).
	Prefix string
	// Region is the bucket's region. Empty: the client asks the server
	// (GetBucketLocation) once per bucket.
	Region string
	// AccessKey, SecretKey and SessionToken, when AccessKey is set, are
	// the static credentials to sign requests with. Otherwise the
	// credentials come from the standard chain (defaultS3Credentials):
	// the AWS_* environment variables, the shared credentials file, then
	// the container, web identity or EC2 instance role.
	AccessKey, SecretKey, SessionToken string
	// CAFile, when set, is a PEM file of certificate authorities trusted
	// besides the system's, for an endpoint with a private CA.
	CAFile string
	// ReadTimeout bounds each ranged read of an opened segment; default
	// DefaultS3ReadTimeout.
	ReadTimeout time.Duration
	// TempDir holds the temporary copy of a segment that Put uploads;
	// default os.TempDir().
	TempDir string
}

func (o *S3Options) setDefaults() {
	if o.Endpoint == "" {
		o.Endpoint = DefaultS3Endpoint
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = DefaultS3ReadTimeout
	}
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	if o.Prefix != "" && !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
}

// Validate reports a missing or bad option.
func (o *S3Options) Validate() error {
	if o.Bucket == "" {
		return errors.New("archive: S3: no bucket")
	}
	if err := s3utils.CheckValidBucketName(o.Bucket); err != nil {
		return fmt.Errorf("archive: S3: bucket %q: %w", o.Bucket, err)
	}
	if _, _, err := parseEndpoint(o.Endpoint); err != nil {
		return err
	}
	if err := checkPrefix(o.Prefix); err != nil {
		return err
	}
	switch {
	case o.AccessKey == "" && (o.SecretKey != "" || o.SessionToken != ""):
		return errors.New("archive: S3: a secret key or session token without an access key")
	case o.AccessKey != "" && o.SecretKey == "":
		return errors.New("archive: S3: an access key without a secret key")
	case o.ReadTimeout < 0:
		return fmt.Errorf("archive: S3: negative read timeout %s", o.ReadTimeout)
	}
	return nil
}

// parseEndpoint splits an S3Options.Endpoint into host[:port] and whether
// it is HTTPS.
func parseEndpoint(endpoint string) (host string, secure bool, err error) {
	if !strings.Contains(endpoint, "://") {
		if endpoint == "" || strings.ContainsAny(endpoint, "/?#@") {
			return "", false, fmt.Errorf("archive: S3 endpoint %q: want host, host:port or an http(s):// URL", endpoint)
		}
		return endpoint, true, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", false, fmt.Errorf("archive: S3 endpoint: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", false, fmt.Errorf("archive: S3 endpoint %q: want an http:// or https:// URL", endpoint)
	case u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Path != "" && u.Path != "/":
		return "", false, fmt.Errorf("archive: S3 endpoint %q: want scheme://host[:port] only", endpoint)
	}
	return u.Host, u.Scheme == "https", nil
}

// checkPrefix checks an S3 key prefix, after setDefaults: empty, or clean
// path segments each followed by '/'.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	p := strings.TrimSuffix(prefix, "/")
	// Clean leaves "..", "." and "/" only where they start a path.
	if p == "" || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "/") || strings.HasPrefix(p, "../") {
		return fmt.Errorf("archive: S3 prefix %q: want a clean relative path such as tether/archive", prefix)
	}
	return nil
}

// S3 is a SegmentStore in a bucket of Amazon S3 or an S3-compatible
// object store (MinIO, Ceph RGW, Cloudflare R2, ...), one object per
// segment, keyed Prefix + name.
//
// Put copies the segment into a temporary file (computing its SHA-256
// and size), then uploads it in one PUT with If-None-Match: *, so that
// of two writers of one name only one creates it, and with its SHA-256 as
// user metadata. A name that exists is compared by that SHA-256 (or,
// for an object stored without it, by reading it): the same bytes are a
// retry and succeed, other bytes fail with ErrExists. Put looks first
// (HEAD), so a retry uploads nothing; on a server that ignores
// If-None-Match, that look is the only guard, and two writers racing
// with different bytes under one name could both succeed, the later
// replacing the earlier (Tether's archiver does not race: one leader
// writes, and a name's bytes depend only on its aggregates).
//
// Open reads with ranged GETs, each pinned to the ETag the object had
// when opened (If-Match): reading one aggregate fetches its block only.
//
// A bucket with versioning keeps deleted and, on a server ignoring
// If-None-Match, replaced versions; Delete removes the current one.
type S3 struct {
	client *minio.Client
	core   minio.Core
	opts   S3Options
}

var _ SegmentStore = (*S3)(nil)

// NewS3 returns the store in opts.Bucket, after checking that the bucket
// exists and the credentials may see it (bounded by 30 s).
func NewS3(ctx context.Context, opts S3Options) (*S3, error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	host, secure, _ := parseEndpoint(opts.Endpoint)
	creds := defaultS3Credentials()
	if opts.AccessKey != "" {
		creds = credentials.NewStaticV4(opts.AccessKey, opts.SecretKey, opts.SessionToken)
	}
	mopts := &minio.Options{Creds: creds, Secure: secure, Region: opts.Region}
	if opts.CAFile != "" {
		tr, err := transportWithCA(secure, opts.CAFile)
		if err != nil {
			return nil, err
		}
		mopts.Transport = tr
	}
	client, err := minio.New(host, mopts)
	if err != nil {
		return nil, fmt.Errorf("archive: S3 client for %s: %w", opts.Endpoint, err)
	}
	s := &S3{client: client, core: minio.Core{Client: client}, opts: opts}

	cctx, cancel := context.WithTimeout(ctx, s3CheckTimeout)
	defer cancel()
	ok, err := client.BucketExists(cctx, opts.Bucket)
	if err != nil {
		return nil, fmt.Errorf("archive: %s: check the bucket at %s: %w", s, opts.Endpoint, err)
	}
	if !ok {
		return nil, fmt.Errorf("archive: %s: no bucket %q at %s", s, opts.Bucket, opts.Endpoint)
	}
	return s, nil
}

// defaultS3Credentials is the credential chain of a store without static
// credentials, the first that has some: the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), the
// shared credentials and config files (AWS_SHARED_CREDENTIALS_FILE,
// AWS_CONFIG_FILE, AWS_PROFILE; ~/.aws/credentials), then the IAM provider:
// ECS or EKS container credentials, a web identity
// (AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN), or the EC2 instance's
// role. None: requests are anonymous.
func defaultS3Credentials() *credentials.Credentials {
	return credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{},
		&credentials.IAM{},
	})
}

// transportWithCA returns minio's default transport trusting the
// certificate authorities of the PEM file caFile besides the system's.
func transportWithCA(secure bool, caFile string) (http.RoundTripper, error) {
	if !secure {
		return nil, fmt.Errorf("archive: S3: a CA file (%s) with a plain-HTTP endpoint", caFile)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("archive: S3 CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("archive: S3 CA file %s: no PEM certificate", caFile)
	}
	tr, err := minio.DefaultTransport(true)
	if err != nil {
		return nil, fmt.Errorf("archive: S3 transport: %w", err)
	}
	tr.TLSClientConfig.RootCAs = pool
	return tr, nil
}

// String returns the store's location, s3://bucket/prefix.
func (s *S3) String() string {
	return "s3://" + s.opts.Bucket + "/" + s.opts.Prefix
}

// key returns the object key of segment name, after checking the name.
func (s *S3) key(name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	return s.opts.Prefix + name, nil
}

// s3Info describes a segment from its object's description. ModTime is in
// UTC and whole seconds, as HEAD gives it (listings give milliseconds), so
// Put, Stat and List agree.
func s3Info(name string, oi minio.ObjectInfo) Info {
	return Info{Name: name, Size: oi.Size, ModTime: oi.LastModified.UTC().Truncate(time.Second)}
}

// isNotFound reports whether err is S3's answer for a missing key.
func isNotFound(err error) bool {
	return minio.ToErrorResponse(err).Code == minio.NoSuchKey
}

// Put implements SegmentStore.
func (s *S3) Put(ctx context.Context, name string, r io.Reader) (Info, error) {
	key, err := s.key(name)
	if err != nil {
		return Info{}, err
	}
	f, sum, size, err := s.spool(ctx, r)
	if f != nil {
		defer os.Remove(f.Name())
		defer f.Close()
	}
	if err != nil {
		return Info{}, fmt.Errorf("archive: put %s: %w", name, err)
	}
	if size > MaxS3SegmentSize {
		return Info{}, fmt.Errorf("archive: put %s: %d bytes, more than an S3 store takes (%d)", name, size, int64(MaxS3SegmentSize))
	}

	// A retry finds the segment stored, and uploads nothing.
	info, err := s.compare(ctx, name, key, sum, size)
	if !errors.Is(err, ErrNotFound) {
		return info, err
	}
	// ConditionalRequestConflict (409) is S3's answer to a conditional
	// write racing another one on the key: retry, a few times, from the
	// comparison.
	for attempt := 1; ; attempt++ {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return Info{}, fmt.Errorf("archive: put %s: %w", name, err)
		}
		opts := minio.PutObjectOptions{
			UserMetadata:     map[string]string{s3SumKey: hex.EncodeToString(sum[:])},
			ContentType:      "application/octet-stream",
			DisableMultipart: true, // one request, which If-None-Match guards
			SendContentMd5:   true, // the server checks the bytes it received
		}
		opts.SetMatchETagExcept("*") // If-None-Match: *, create only
		_, err := s.client.PutObject(ctx, s.opts.Bucket, key, f, size, opts)
		if err == nil {
			break
		}
		code := minio.ToErrorResponse(err).Code
		if code != minio.PreconditionFailed && code != "ConditionalRequestConflict" {
			return Info{}, fmt.Errorf("archive: put %s: %w", name, err)
		}
		// Another writer created the name first (or an earlier attempt of
		// this PUT did, its answer lost).
		info, err := s.compare(ctx, name, key, sum, size)
		if !errors.Is(err, ErrNotFound) || attempt == 3 {
			return info, err
		}
	}
	// What is stored now must be this segment: on a server that ignores
	// If-None-Match, another writer may have replaced it meanwhile.
	info, err = s.compare(ctx, name, key, sum, size)
	if errors.Is(err, ErrNotFound) {
		return Info{}, fmt.Errorf("archive: put %s: deleted as it was written: %w", name, err)
	}
	return info, err
}

// spool copies r into a new temporary file and returns it with the
// SHA-256 and the length of what it copied. The caller closes and
// removes the file, also when spool fails.
func (s *S3) spool(ctx context.Context, r io.Reader) (*os.File, [sha256.Size]byte, int64, error) {
	var sum [sha256.Size]byte
	f, err := os.CreateTemp(s.opts.TempDir, s3SpoolPattern)
	if err != nil {
		return nil, sum, 0, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), ctxReader{ctx, r})
	if err != nil {
		return f, sum, 0, err
	}
	h.Sum(sum[:0])
	return f, sum, n, nil
}

// compare describes the stored object key when it holds size bytes of
// SHA-256 sum. It fails with ErrExists when it holds other bytes, and
// with ErrNotFound when there is no such object.
func (s *S3) compare(ctx context.Context, name, key string, sum [sha256.Size]byte, size int64) (Info, error) {
	oi, err := s.client.StatObject(ctx, s.opts.Bucket, key, minio.StatObjectOptions{})
	if isNotFound(err) {
		return Info{}, fmt.Errorf("%w: segment %s", ErrNotFound, name)
	}
	if err != nil {
		return Info{}, fmt.Errorf("archive: put %s: compare with the stored segment: %w", name, err)
	}
	if oi.Size != size {
		return Info{}, fmt.Errorf("%w: %s", ErrExists, name)
	}
	var stored []byte
	for k, v := range oi.UserMetadata {
		if b, err := hex.DecodeString(v); err == nil && len(b) == sha256.Size && strings.EqualFold(k, s3SumKey) {
			stored = b
		}
	}
	if stored == nil {
		// Stored by other means (a copy, a restore): read it.
		if stored, err = s.hashObject(ctx, key, oi.ETag); err != nil {
			return Info{}, fmt.Errorf("archive: put %s: compare with the stored segment: %w", name, err)
		}
	}
	if !bytes.Equal(stored, sum[:]) {
		return Info{}, fmt.Errorf("%w: %s", ErrExists, name)
	}
	return s3Info(name, oi), nil
}

// hashObject reads object key, as it was with ETag etag, and returns its
// SHA-256.
func (s *S3) hashObject(ctx context.Context, key, etag string) ([]byte, error) {
	var opts minio.GetObjectOptions
	if etag != "" {
		if err := opts.SetMatchETag(etag); err != nil {
			return nil, err
		}
	}
	body, _, _, err := s.core.GetObject(ctx, s.opts.Bucket, key, opts)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	h := sha256.New()
	if _, err := io.Copy(h, body); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// Open implements SegmentStore. The Object's reads are not bound to ctx:
// they last until it is closed, each bounded by S3Options.ReadTimeout.
func (s *S3) Open(ctx context.Context, name string) (Object, error) {
	key, err := s.key(name)
	if err != nil {
		return nil, err
	}
	oi, err := s.client.StatObject(ctx, s.opts.Bucket, key, minio.StatObjectOptions{})
	if isNotFound(err) {
		return nil, fmt.Errorf("%w: segment %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("archive: open %s: %w", name, err)
	}
	octx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &s3Object{s: s, name: name, key: key, etag: oi.ETag, size: oi.Size, ctx: octx, cancel: cancel}, nil
}

// s3Object is an opened segment object. Each ReadAt is one ranged GET of
// exactly the bytes asked for, so it is safe for concurrent use and an
// error does not outlive its read.
type s3Object struct {
	s      *S3
	name   string
	key    string
	etag   string // the object's when opened; reads require it
	size   int64
	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
}

// Size implements Object.
func (o *s3Object) Size() int64 { return o.size }

// Close implements io.Closer. It ends reads under way.
func (o *s3Object) Close() error {
	o.cancel()
	return nil
}

// ReadAt implements io.ReaderAt with one GET of the range [off,
// off+len(p)), cut at the object's end.
func (o *s3Object) ReadAt(p []byte, off int64) (int, error) {
	switch {
	case off < 0:
		return 0, fmt.Errorf("archive: read %s: negative offset %d", o.name, off)
	case o.ctx.Err() != nil:
		return 0, fmt.Errorf("archive: read %s: %w", o.name, fs.ErrClosed)
	case off >= o.size:
		return 0, io.EOF
	case len(p) == 0:
		return 0, nil
	}
	n := min(int64(len(p)), o.size-off)
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+n-1); err != nil {
		return 0, err
	}
	if o.etag != "" {
		if err := opts.SetMatchETag(o.etag); err != nil {
			return 0, err
		}
	}
	ctx, cancel := context.WithTimeout(o.ctx, o.s.opts.ReadTimeout)
	defer cancel()
	body, _, header, err := o.s.core.GetObject(ctx, o.s.opts.Bucket, o.key, opts)
	switch {
	case isNotFound(err):
		return 0, fmt.Errorf("archive: read %s: %w: deleted since it was opened", o.name, ErrNotFound)
	case minio.ToErrorResponse(err).Code == minio.PreconditionFailed:
		return 0, fmt.Errorf("archive: read %s: replaced since it was opened", o.name)
	case err != nil:
		return 0, fmt.Errorf("archive: read %s: %w", o.name, err)
	}
	defer body.Close()
	if err := checkContentRange(header.Get("Content-Range"), off, n, o.size); err != nil {
		return 0, fmt.Errorf("archive: read %s: %w", o.name, err)
	}
	m, err := io.ReadFull(body, p[:n])
	if err != nil {
		return m, fmt.Errorf("archive: read %s: %w", o.name, err)
	}
	if n < int64(len(p)) {
		return m, io.EOF
	}
	return m, nil
}

// checkContentRange checks that a ranged GET's answer holds bytes [off,
// off+n) of an object of size bytes. A server may answer a range that is
// the whole object with the whole object, without Content-Range.
func checkContentRange(cr string, off, n, size int64) error {
	if cr == "" {
		if off == 0 && n == size {
			return nil
		}
		return fmt.Errorf("the server ignored the byte range %d-%d", off, off+n-1)
	}
	want := "bytes " + strconv.FormatInt(off, 10) + "-" + strconv.FormatInt(off+n-1, 10) + "/" + strconv.FormatInt(size, 10)
	if cr != want {
		return fmt.Errorf("the server answered range %q, want %q", cr, want)
	}
	return nil
}

// Stat implements SegmentStore.
func (s *S3) Stat(ctx context.Context, name string) (Info, error) {
	key, err := s.key(name)
	if err != nil {
		return Info{}, err
	}
	oi, err := s.client.StatObject(ctx, s.opts.Bucket, key, minio.StatObjectOptions{})
	if isNotFound(err) {
		return Info{}, fmt.Errorf("%w: segment %s", ErrNotFound, name)
	}
	if err != nil {
		return Info{}, fmt.Errorf("archive: stat %s: %w", name, err)
	}
	return s3Info(name, oi), nil
}

// List implements SegmentStore. It skips keys that are not segments:
// keys further down ("directories"), names that are not segment names.
func (s *S3) List(ctx context.Context, prefix string) ([]Info, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the listing if it stops early
	var infos []Info
	for oi := range s.client.ListObjects(ctx, s.opts.Bucket, minio.ListObjectsOptions{Prefix: s.opts.Prefix + prefix}) {
		if oi.Err != nil {
			return nil, fmt.Errorf("archive: list %s: %w", s, oi.Err)
		}
		name := strings.TrimPrefix(oi.Key, s.opts.Prefix)
		if CheckName(name) != nil {
			continue
		}
		infos = append(infos, s3Info(name, oi))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(infos, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return infos, nil
}

// Delete implements SegmentStore.
func (s *S3) Delete(ctx context.Context, name string) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	if err := s.client.RemoveObject(ctx, s.opts.Bucket, key, minio.RemoveObjectOptions{}); err != nil && !isNotFound(err) {
		return fmt.Errorf("archive: delete %s: %w", name, err)
	}
	return nil
}
