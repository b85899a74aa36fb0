package archive_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/tetherhq/tether/events/archive"
)

// testBucket is the bucket of newFakeS3's server.
const testBucket = "segments"

// fakeS3 is an S3 server in the test process: gofakes3 with its
// in-memory backend, behind httptest, counting what it serves.
type fakeS3 struct {
	srv     *httptest.Server
	backend *s3mem.Backend
	clock   gofakes3.TimeSource // the server's and the backend's (newFakeS3)
	// ignoreIfNoneMatch, set before use, makes the server ignore
	// If-None-Match on PUT, as some S3-compatible servers do.
	ignoreIfNoneMatch bool
	// beforePut, set before use, runs before the server handles a PUT
	// of key.
	beforePut func(key string)

	mu       sync.Mutex
	stats    serveStats
	authKeys map[string]bool // access keys that signed requests
}

// serveStats counts requests and the object bytes GETs served.
type serveStats struct {
	requests int
	gets     int
	getBytes int64
	puts     int
}

// newFakeS3 starts a server holding the empty bucket testBucket.
func newFakeS3(t *testing.T) *fakeS3 {
	t.Helper()
	// The server stamps an object's Last-Modified (what HEAD answers) and
	// its backend the object's time (what a listing answers), each from
	// its own clock read: when the two reads fell on either side of a
	// second, Put and List disagreed, a flake no real S3 has (one time per
	// object). One fixed clock for both: every object has the same time.
	clock := gofakes3.FixedTimeSource(time.Now())
	f := &fakeS3{backend: s3mem.New(s3mem.WithTimeSource(clock)), clock: clock, authKeys: map[string]bool{}}
	if err := f.backend.CreateBucket(testBucket); err != nil {
		t.Fatal(err)
	}
	h := gofakes3.New(f.backend, gofakes3.WithTimeSource(clock)).Server()
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.ignoreIfNoneMatch {
			r.Header.Del("If-None-Match")
		}
		key, isObject := strings.CutPrefix(r.URL.Path, "/"+testBucket+"/")
		if r.Method == http.MethodPut && isObject && f.beforePut != nil {
			f.beforePut(key)
		}
		f.mu.Lock()
		f.stats.requests++
		switch r.Method {
		case http.MethodGet:
			if isObject {
				f.stats.gets++
			}
		case http.MethodPut:
			f.stats.puts++
		}
		if _, cred, ok := strings.Cut(r.Header.Get("Authorization"), "Credential="); ok {
			f.authKeys[strings.Split(cred, "/")[0]] = true
		}
		f.mu.Unlock()
		if r.Method == http.MethodGet && isObject {
			w = &countingWriter{ResponseWriter: w, f: f}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// take returns the counts since the last call.
func (f *fakeS3) take() serveStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	f.stats = serveStats{}
	return s
}

// countingWriter counts the body bytes of a GET's answer, before it
// writes them: once written, the client may go on before Write returns.
type countingWriter struct {
	http.ResponseWriter
	f *fakeS3
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.f.mu.Lock()
	c.f.stats.getBytes += int64(len(p))
	c.f.mu.Unlock()
	return c.ResponseWriter.Write(p)
}

// keys lists the bucket's keys under prefix, without it, sorted.
func (f *fakeS3) keys(t *testing.T, prefix string) []string {
	t.Helper()
	list, err := f.backend.ListBucket(testBucket, &gofakes3.Prefix{HasPrefix: prefix != "", Prefix: prefix}, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, c := range list.Contents {
		keys = append(keys, strings.TrimPrefix(c.Key, prefix))
	}
	slices.Sort(keys)
	return keys
}

// object returns the stored bytes of key.
func (f *fakeS3) object(t *testing.T, key string) []byte {
	t.Helper()
	obj, err := f.backend.GetObject(testBucket, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Contents.Close()
	b, err := io.ReadAll(obj.Contents)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// putRaw stores b under key past the store, without its metadata, as
// another tool (a copy, a restore) would.
func (f *fakeS3) putRaw(t *testing.T, key string, b []byte) {
	t.Helper()
	if _, err := f.backend.PutObject(testBucket, key, map[string]string{"Last-Modified": f.clock.Now().UTC().Format(http.TimeFormat)}, bytes.NewReader(b), int64(len(b)), nil); err != nil {
		t.Error(err)
	}
}

// s3Options returns the options of a store on f's server.
func s3Options(t *testing.T, f *fakeS3, prefix string) archive.S3Options {
	return archive.S3Options{
		Endpoint: f.srv.URL, Bucket: testBucket, Prefix: prefix, Region: "us-east-1",
		AccessKey: "AKIDTEST", SecretKey: "not-a-secret", TempDir: t.TempDir(),
	}
}

// newS3Store returns an S3 store on f's server, keys under prefix.
func newS3Store(t *testing.T, f *fakeS3, prefix string) testStore {
	t.Helper()
	opts := s3Options(t, f, prefix)
	s, err := archive.NewS3(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if prefix != "" {
		prefix += "/"
	}
	return testStore{
		SegmentStore: s,
		files: func(t *testing.T) []string {
			names := f.keys(t, prefix)
			spooled, err := os.ReadDir(opts.TempDir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range spooled {
				names = append(names, "spool:"+e.Name())
			}
			return names
		},
		read:         func(t *testing.T, name string) []byte { return f.object(t, prefix+name) },
		atomicCreate: true,
	}
}

// TestS3ReadsRanges reads single aggregates of a segment of many blocks
// from S3: opening it fetches the header, the footer and the index, and
// each read one block, a small part of the object.
func TestS3ReadsRanges(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	s := newS3Store(t, f, "archive")
	aggs := makeAggregates(6, 200)
	b, sum := writeSegment(t, aggs, archive.WriterOptions{})
	if _, err := s.Put(ctx, "big", bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	f.take()

	r, err := archive.OpenSegment(ctx, s, "big")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	opened := f.take()
	t.Logf("segment of %d bytes in %d blocks; opening it: %+v", len(b), sum.Blocks, opened)
	if opened.gets != 3 || opened.getBytes*10 > int64(len(b)) {
		t.Errorf("opening made %d GETs of %d bytes in all, want 3 (header, footer, index) of far less than %d", opened.gets, opened.getBytes, len(b))
	}

	var largest int64
	for _, i := range []int{0, 1, 50, 99, 150, 199} {
		recs, err := r.Read(aggs[i].subject)
		if err != nil {
			t.Fatal(err)
		}
		checkRecords(t, aggs[i].subject, recs, aggs[i].records)
		read := f.take()
		if read.requests != 1 || read.gets != 1 {
			t.Errorf("Read(%s) made %d requests, %d GETs; want one GET", aggs[i].subject, read.requests, read.gets)
		}
		largest = max(largest, read.getBytes)
	}
	t.Logf("the largest read of one aggregate fetched %d bytes", largest)
	if largest*10 > int64(len(b)) {
		t.Errorf("reading one aggregate fetched %d bytes of a %d-byte segment", largest, len(b))
	}

	// Verify reads everything, in large reads.
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	// One GET per MiB for the SHA-256, then one per block.
	verified := f.take()
	t.Logf("Verify: %+v", verified)
	if want := (len(b)-32+1<<20-1)>>20 + sum.Blocks; verified.gets != want {
		t.Errorf("Verify made %d GETs, want %d: the segment is %d bytes in %d blocks", verified.gets, want, len(b), sum.Blocks)
	}
}

// TestS3ConcurrentReaders reads one opened segment from many goroutines;
// run with -race.
func TestS3ConcurrentReaders(t *testing.T) {
	ctx := context.Background()
	s := newS3Store(t, newFakeS3(t), "")
	aggs := makeAggregates(7, 60)
	b, _ := writeSegment(t, aggs, archive.WriterOptions{BlockSize: 16 << 10})
	if _, err := s.Put(ctx, "seg", bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	r, err := archive.OpenSegment(ctx, s, "seg")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			if g == 0 {
				if err := r.Verify(); err != nil {
					errs <- err
				}
				return
			}
			for i := g; i < len(aggs); i += 7 {
				recs, err := r.Read(aggs[i].subject)
				if err != nil {
					errs <- err
					return
				}
				if len(recs) != len(aggs[i].records) || !bytes.Equal(recs[0].Data, aggs[i].records[0].Data) {
					errs <- fmt.Errorf("%s read back wrong", aggs[i].subject)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestS3PutRace has another writer create the name between Put's look
// and its upload: If-None-Match refuses the upload, and Put compares
// with what the other writer stored, here without the SHA-256 metadata
// (so by reading it). The same bytes succeed; others fail with
// ErrExists and are not stored.
func TestS3PutRace(t *testing.T) {
	ctx := context.Background()
	a, _ := writeSegment(t, makeAggregates(20, 10), archive.WriterOptions{})
	b, _ := writeSegment(t, makeAggregates(21, 10), archive.WriterOptions{})
	for _, tc := range []struct {
		name    string
		other   []byte // what the other writer stores
		wantErr error
	}{
		{"same bytes", a, nil},
		{"other bytes", b, archive.ErrExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeS3(t)
			s := newS3Store(t, f, "p")
			var once sync.Once
			f.beforePut = func(key string) { once.Do(func() { f.putRaw(t, key, tc.other) }) }
			f.take()
			_, err := s.Put(ctx, "seg", bytes.NewReader(a))
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("Put: %v, want %v", err, tc.wantErr)
			}
			if st := f.take(); st.puts != 1 {
				t.Errorf("%d PUTs, want 1 (refused)", st.puts)
			}
			if got := s.read(t, "seg"); !bytes.Equal(got, tc.other) {
				t.Error("the other writer's segment was replaced")
			}
			if keys := f.keys(t, ""); !slices.Equal(keys, []string{"p/seg"}) {
				t.Errorf("keys: %v", keys)
			}
		})
	}
}

// TestS3PutFindsForeignCopy puts a segment that another tool stored
// without the SHA-256 metadata: Put compares by reading it.
func TestS3PutFindsForeignCopy(t *testing.T) {
	ctx := context.Background()
	a, _ := writeSegment(t, makeAggregates(22, 10), archive.WriterOptions{})
	f := newFakeS3(t)
	s := newS3Store(t, f, "")
	f.putRaw(t, "restored", a)
	f.putRaw(t, "damaged", append(bytes.Clone(a[:100]), make([]byte, len(a)-100)...))
	f.take()
	if _, err := s.Put(ctx, "restored", bytes.NewReader(a)); err != nil {
		t.Fatalf("Put of the restored segment: %v", err)
	}
	if st := f.take(); st.puts != 0 || st.gets != 1 {
		t.Errorf("Put of a stored segment: %+v, want no PUT and one GET", st)
	}
	if _, err := s.Put(ctx, "damaged", bytes.NewReader(a)); !errors.Is(err, archive.ErrExists) {
		t.Fatalf("Put over a damaged copy: %v, want ErrExists", err)
	}
}

// TestS3RetryUploadsNothing checks a retried Put finds the segment by its
// metadata: one HEAD, no upload, no download.
func TestS3RetryUploadsNothing(t *testing.T) {
	ctx := context.Background()
	a, _ := writeSegment(t, makeAggregates(23, 10), archive.WriterOptions{})
	f := newFakeS3(t)
	s := newS3Store(t, f, "")
	if _, err := s.Put(ctx, "seg", bytes.NewReader(a)); err != nil {
		t.Fatal(err)
	}
	f.take()
	if _, err := s.Put(ctx, "seg", bytes.NewReader(a)); err != nil {
		t.Fatal(err)
	}
	if st := f.take(); st.requests != 1 || st.puts != 0 || st.gets != 0 {
		t.Errorf("retried Put: %+v, want one request (HEAD)", st)
	}
}

// TestS3Keys checks where segments go: under the prefix, apart from
// another store's; List skips keys further down.
func TestS3Keys(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	top := newS3Store(t, f, "")
	under := newS3Store(t, f, "tether/archive/")
	if _, err := top.Put(ctx, "seg", bytes.NewReader([]byte("top"))); err != nil {
		t.Fatal(err)
	}
	if _, err := under.Put(ctx, "seg", bytes.NewReader([]byte("under"))); err != nil {
		t.Fatal(err)
	}
	if keys := f.keys(t, ""); !slices.Equal(keys, []string{"seg", "tether/archive/seg"}) {
		t.Errorf("keys: %v", keys)
	}
	for _, s := range []testStore{top, under} {
		if list, err := s.List(ctx, ""); err != nil || len(list) != 1 || list[0].Name != "seg" {
			t.Errorf("List: %+v, %v", list, err)
		}
	}
	if err := top.Delete(ctx, "seg"); err != nil {
		t.Fatal(err)
	}
	if keys := f.keys(t, ""); !slices.Equal(keys, []string{"tether/archive/seg"}) {
		t.Errorf("keys after Delete: %v", keys)
	}
}

// TestS3ObjectReadAt checks the edges of an opened object's ReadAt.
func TestS3ObjectReadAt(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	s := newS3Store(t, f, "")
	data := []byte("0123456789")
	if _, err := s.Put(ctx, "seg", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	obj, err := s.Open(ctx, "seg")
	if err != nil {
		t.Fatal(err)
	}
	if obj.Size() != 10 {
		t.Errorf("Size %d", obj.Size())
	}
	for _, tc := range []struct {
		off, len int
		want     string
		wantErr  error
	}{
		{0, 10, "0123456789", nil},
		{3, 4, "3456", nil},
		{8, 4, "89", io.EOF},
		{10, 1, "", io.EOF},
		{0, 0, "", nil},
	} {
		p := make([]byte, tc.len)
		n, err := obj.ReadAt(p, int64(tc.off))
		if string(p[:n]) != tc.want || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
			t.Errorf("ReadAt(%d bytes at %d): %q, %v; want %q, %v", tc.len, tc.off, p[:n], err, tc.want, tc.wantErr)
		}
	}
	if _, err := obj.ReadAt(make([]byte, 1), -1); err == nil {
		t.Error("ReadAt at -1 succeeded")
	}

	// The object replaced by one of another size: the read fails.
	f.putRaw(t, "seg", []byte("other content"))
	if n, err := obj.ReadAt(make([]byte, 4), 2); err == nil {
		t.Errorf("ReadAt of a replaced object: %d bytes, no error", n)
	}
	// Deleted: ErrNotFound.
	if err := s.Delete(ctx, "seg"); err != nil {
		t.Fatal(err)
	}
	if _, err := obj.ReadAt(make([]byte, 4), 2); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("ReadAt of a deleted object: %v, want ErrNotFound", err)
	}
	// Closed: fs.ErrClosed.
	if err := obj.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := obj.ReadAt(make([]byte, 4), 2); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("ReadAt after Close: %v, want fs.ErrClosed", err)
	}
}

// TestS3OpenOutlivesContext uses an opened object after the context of
// Open has ended, as the API server's cache of open segments does.
func TestS3OpenOutlivesContext(t *testing.T) {
	s := newS3Store(t, newFakeS3(t), "")
	if _, err := s.Put(context.Background(), "seg", bytes.NewReader([]byte("0123456789"))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	obj, err := s.Open(ctx, "seg")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	cancel()
	p := make([]byte, 3)
	if n, err := obj.ReadAt(p, 1); err != nil || string(p[:n]) != "123" {
		t.Fatalf("ReadAt after Open's context ended: %q, %v", p[:n], err)
	}
}

// TestS3Spool checks Put fails, storing nothing, when it cannot write its
// temporary copy.
func TestS3Spool(t *testing.T) {
	f := newFakeS3(t)
	opts := s3Options(t, f, "")
	opts.TempDir = filepath.Join(t.TempDir(), "missing")
	s, err := archive.NewS3(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(context.Background(), "seg", bytes.NewReader([]byte("x"))); err == nil {
		t.Fatal("Put without a temporary directory succeeded")
	}
	if keys := f.keys(t, ""); len(keys) != 0 {
		t.Errorf("keys: %v", keys)
	}
}

func TestNewS3(t *testing.T) {
	f := newFakeS3(t)
	for _, tc := range []struct {
		name   string
		change func(*archive.S3Options)
		want   string // in the error; "" for success
	}{
		{"ok", func(*archive.S3Options) {}, ""},
		{"no bucket", func(o *archive.S3Options) { o.Bucket = "" }, "no bucket"},
		{"bad bucket", func(o *archive.S3Options) { o.Bucket = "Bad_Bucket" }, "bucket"},
		{"missing bucket", func(o *archive.S3Options) { o.Bucket = "missing" }, `no bucket "missing"`},
		{"endpoint with path", func(o *archive.S3Options) { o.Endpoint += "/x" }, "endpoint"},
		{"endpoint scheme", func(o *archive.S3Options) { o.Endpoint = "ftp://host" }, "endpoint"},
		{"secret without key", func(o *archive.S3Options) { o.AccessKey = "" }, "without an access key"},
		{"key without secret", func(o *archive.S3Options) { o.SecretKey = "" }, "without a secret key"},
		{"prefix with ..", func(o *archive.S3Options) { o.Prefix = "a/../b" }, "prefix"},
		{"absolute prefix", func(o *archive.S3Options) { o.Prefix = "/a" }, "prefix"},
		{"CA with http", func(o *archive.S3Options) { o.CAFile = "ca.pem" }, "plain-HTTP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := s3Options(t, f, "")
			tc.change(&opts)
			_, err := archive.NewS3(context.Background(), opts)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("NewS3: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestOpenStore(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-a-secret")
	t.Setenv("AWS_SESSION_TOKEN", "")

	dir := filepath.Join(t.TempDir(), "archive")
	for _, location := range []string{dir, "file://" + dir, "file://localhost" + dir} {
		s, err := archive.OpenStore(ctx, location)
		if err != nil {
			t.Fatalf("OpenStore(%s): %v", location, err)
		}
		if d, ok := s.(*archive.Dir); !ok || d.Path() != dir {
			t.Errorf("OpenStore(%s): %#v, want the Dir %s", location, s, dir)
		}
	}

	s, err := archive.OpenStore(ctx, "s3://"+testBucket+"/tether/archive?region=us-east-1&endpoint="+f.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*archive.S3); !ok {
		t.Fatalf("OpenStore(s3://...): %T", s)
	}
	if _, err := s.Put(ctx, "seg", bytes.NewReader([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	if keys := f.keys(t, ""); !slices.Equal(keys, []string{"tether/archive/seg"}) {
		t.Errorf("keys: %v", keys)
	}
	f.mu.Lock()
	if !f.authKeys["AKIDFROMENV"] || len(f.authKeys) != 1 {
		t.Errorf("requests signed by %v, want AKIDFROMENV (AWS_ACCESS_KEY_ID)", f.authKeys)
	}
	f.mu.Unlock()

	for _, tc := range []struct{ location, want string }{
		{"", "no archive store"},
		{"s3://", "no bucket"},
		{"s3:///prefix", "no bucket"},
		{"s3://key:hunter2@" + testBucket + "/p", "credentials do not go in the URL"},
		{"s3://" + testBucket + ":9000/p", "takes no port"},
		{"s3://" + testBucket + "/p?insecure=true", "endpoint=http://host:port"},
		{"s3://" + testBucket + "/p?secret_key=x", `unknown parameter "secret_key"`},
		{"s3://" + testBucket + "/p?region=a&region=b", "region given 2 times"},
		{"s3://" + testBucket + "/p?endpoint=ftp://host", "endpoint"},
		{"s3://" + testBucket + "/a/../b?endpoint=" + f.srv.URL, "prefix"},
		{"s3://Bad_Bucket/p", "bucket"},
		{"gs://bucket/p", `scheme "gs"`},
		{"file:relative/dir", "file:///absolute/path"},
		{"file://host/dir", `host "host"`},
		{"file:///dir?x=1", "without user, query or fragment"},
	} {
		_, err := archive.OpenStore(ctx, tc.location)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenStore(%q): %v, want an error saying %q", tc.location, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("OpenStore(%q): the error shows the password: %v", tc.location, err)
		}
	}
}
