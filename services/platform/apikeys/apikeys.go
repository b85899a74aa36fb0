// Package apikeys authenticates API callers by key. A keys file lists each
// key by its SHA-256 hash (never the key itself), with a name (the
// principal that events and logs show), a role and an optional expiry. The
// file is re-read when it changes, so a key is added, rotated or revoked
// without a restart; a file that no longer parses leaves the keys already
// loaded in force, and says why in the log.
//
// The file is text, one key per line, '#' starting a comment:
//
//	# name          role        hash or certificate name                   expires (optional)
//	matchmaker-eu   matchmaker  sha256:9f86d081884c7d659a2feaa0c55ad015…   2027-06-30T00:00:00Z
//	matchmaker-us   matchmaker  cert:mm.us.example.com
//
// A "cert:NAME" line authenticates a TLS client certificate, verified by
// the API's client CA, whose subject common name or one of whose subject
// alternative names (DNS, URI, e-mail) is NAME.
//
// `tether keys add` makes a key, appends its line and prints the key once.
package apikeys

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/services/platform/filewatch"
)

// Role is what a principal may do; the API's permission matrix says which
// calls each role may make.
type Role string

// The roles.
const (
	Admin      Role = "admin"      // everything
	Operator   Role = "operator"   // fleets, game servers, hosts, projections
	Matchmaker Role = "matchmaker" // allocations, player sessions, reads of game servers and sessions
	Viewer     Role = "viewer"     // reads and watches
	Auditor    Role = "auditor"    // reads, history and explanations
)

// Roles lists every role, most powerful first.
var Roles = []Role{Admin, Operator, Matchmaker, Viewer, Auditor}

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("apikeys: unknown role %q (want one of %s)", s, roleList())
}

func roleList() string {
	names := make([]string, len(Roles))
	for i, r := range Roles {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// Principal is who made a call: a key's name and role, and how it was
// authenticated.
type Principal struct {
	Name string
	Role Role
	// Via is how the caller proved it: "api-key" or "client-cert".
	Via string
}

// Actor is how events record the principal as their actor: its name, then
// its role and how it authenticated, e.g. "matchmaker-eu (matchmaker,
// api-key)".
func (p Principal) Actor() string {
	return p.Name + " (" + string(p.Role) + ", " + p.Via + ")"
}

// Errors Authenticate returns; each is a reason a caller is refused.
var (
	ErrNoKey      = errors.New("no API key: send Authorization: Bearer <key>")
	ErrUnknownKey = errors.New("the API key is not known (revoked, mistyped, or from another installation)")
	ErrExpired    = errors.New("the API key has expired")
	// ErrUnknownCert refuses a verified client certificate whose names
	// match no cert: line of the keys file.
	ErrUnknownCert = errors.New("the client certificate names no principal of the keys file")
)

// key is one line of the keys file.
type key struct {
	name    string
	role    Role
	expires time.Time // zero: never
}

// Keys is the set of keys of a keys file, safe for concurrent use. The
// file is reloaded when it changes (Watch): a file that does not parse
// leaves the keys loaded before in force.
type Keys struct {
	file *filewatch.File[keySet]
}

// keySet is a parsed keys file.
type keySet struct {
	byHash map[[sha256.Size]byte]key
	byCert map[string]key // certificate name → principal
}

// Load reads the keys file at path. A file that does not parse is an error
// naming its line.
func Load(path string, log *slog.Logger) (*Keys, error) {
	f, err := filewatch.Load(path, "API keys", parse, log)
	if err != nil {
		return nil, fmt.Errorf("apikeys: %w", err)
	}
	return &Keys{file: f}, nil
}

// Len is the number of keys loaded.
func (k *Keys) Len() int { v := k.file.Value(); return len(v.byHash) + len(v.byCert) }

// Authenticate returns the principal whose key secret is, at time now.
func (k *Keys) Authenticate(secret string, now time.Time) (Principal, error) {
	if secret == "" {
		return Principal{}, ErrNoKey
	}
	found, ok := k.file.Value().byHash[sha256.Sum256([]byte(secret))]
	switch {
	case !ok:
		return Principal{}, ErrUnknownKey
	case !found.expires.IsZero() && !now.Before(found.expires):
		return Principal{}, fmt.Errorf("%w (%s, at %s)", ErrExpired, found.name, found.expires.Format(time.RFC3339))
	}
	return Principal{Name: found.name, Role: found.role, Via: "api-key"}, nil
}

// AuthenticateCert returns the principal of a verified client
// certificate, given its names (common name, then subject alternative
// names), at time now: the first name with a cert: line.
func (k *Keys) AuthenticateCert(names []string, now time.Time) (Principal, error) {
	certs := k.file.Value().byCert
	for _, n := range names {
		found, ok := certs[n]
		if !ok {
			continue
		}
		if !found.expires.IsZero() && !now.Before(found.expires) {
			return Principal{}, fmt.Errorf("%w (%s, at %s)", ErrExpired, found.name, found.expires.Format(time.RFC3339))
		}
		return Principal{Name: found.name, Role: found.role, Via: "client-cert"}, nil
	}
	return Principal{}, fmt.Errorf("%w (it names %s)", ErrUnknownCert, strings.Join(names, ", "))
}

// Reload re-reads the file if its content changed. A file that does not
// parse, or cannot be read, leaves the loaded keys in force: the error says
// why.
func (k *Keys) Reload() (changed bool, err error) {
	changed, err = k.file.Reload()
	if err != nil {
		return false, fmt.Errorf("apikeys: %w", err)
	}
	return changed, nil
}

// DefaultReloadEvery is how often Watch looks at the file.
const DefaultReloadEvery = filewatch.DefaultInterval

// Watch reloads the file every interval until ctx ends, logging each
// change and each file that was refused.
func (k *Keys) Watch(ctx context.Context, interval time.Duration) { k.file.Watch(ctx, interval) }

// namePattern is what a key's name may be: it is shown as the actor of
// events and in logs.
var namePattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._@-]{0,62}$`)

// parse reads the content of a keys file. An empty one is refused: it is
// more likely a file caught while being rewritten than a wish to refuse
// every caller (a file of comments only does that).
func parse(data []byte) (keySet, error) {
	if len(data) == 0 {
		return keySet{}, errors.New("the file is empty (caught while being written? replace it whole: write beside it, then rename)")
	}
	out := map[[sha256.Size]byte]key{}
	certs := map[string]key{}
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 3 || len(fields) > 4 {
			return keySet{}, fmt.Errorf("line %d: want NAME ROLE sha256:HASH|cert:NAME [EXPIRES], got %d fields", n, len(fields))
		}
		name := fields[0]
		if !namePattern.MatchString(name) {
			return keySet{}, fmt.Errorf("line %d: name %q: letters, digits and ._@- only, up to 63", n, name)
		}
		if names[name] {
			return keySet{}, fmt.Errorf("line %d: name %q is used twice", n, name)
		}
		role, err := ParseRole(fields[1])
		if err != nil {
			return keySet{}, fmt.Errorf("line %d: %w", n, err)
		}
		k := key{name: name, role: role}
		if len(fields) == 4 {
			if k.expires, err = time.Parse(time.RFC3339, fields[3]); err != nil {
				return keySet{}, fmt.Errorf("line %d: expiry %q: want RFC 3339, like 2027-06-30T00:00:00Z", n, fields[3])
			}
		}
		if cert, ok := strings.CutPrefix(fields[2], "cert:"); ok {
			if cert == "" {
				return keySet{}, fmt.Errorf("line %d: cert: names no certificate", n)
			}
			if _, dup := certs[cert]; dup {
				return keySet{}, fmt.Errorf("line %d: certificate name %q is listed twice", n, cert)
			}
			certs[cert] = k
		} else {
			sum, err := parseHash(fields[2])
			if err != nil {
				return keySet{}, fmt.Errorf("line %d: %w", n, err)
			}
			if _, dup := out[sum]; dup {
				return keySet{}, fmt.Errorf("line %d: the same key is listed twice", n)
			}
			out[sum] = k
		}
		names[name] = true
	}
	if err := sc.Err(); err != nil {
		return keySet{}, err
	}
	return keySet{byHash: out, byCert: certs}, nil
}

func parseHash(s string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok {
		return sum, fmt.Errorf("hash %q: want sha256:<64 hex digits>", s)
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size {
		return sum, fmt.Errorf("hash %q: want sha256:<64 hex digits>", s)
	}
	copy(sum[:], b)
	return sum, nil
}

// KeyPrefix starts every key, so that a leaked one is recognisable (and
// found by secret scanners).
const KeyPrefix = "tether_"

// New makes a key: its secret, to hand to the caller once, and its line
// for the keys file. expires zero means never.
func New(name string, role Role, expires time.Time) (secret, line string, err error) {
	if !namePattern.MatchString(name) {
		return "", "", fmt.Errorf("apikeys: name %q: letters, digits and ._@- only, up to 63", name)
	}
	if _, err := ParseRole(string(role)); err != nil {
		return "", "", err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("apikeys: %w", err)
	}
	secret = KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(secret))
	line = fmt.Sprintf("%s %s sha256:%s", name, role, hex.EncodeToString(sum[:]))
	if !expires.IsZero() {
		line += " " + expires.UTC().Format(time.RFC3339)
	}
	return secret, line, nil
}

// Add makes a key and adds its line to the keys file at path (created,
// mode 0600, if missing), returning the key's secret. The file is replaced
// whole (written beside it, then renamed), and only if it parses with the
// new line: a name used twice is refused.
func Add(path, name string, role Role, expires time.Time) (string, error) {
	secret, line, err := New(name, role, expires)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("apikeys: %w", err)
	}
	if len(data) > 0 && !bytes.HasSuffix(data, []byte("\n")) {
		data = append(data, '\n')
	}
	data = append(data, line+"\n"...)
	if _, err := parse(data); err != nil {
		return "", fmt.Errorf("apikeys: %s with the new key: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".keys-*")
	if err != nil {
		return "", fmt.Errorf("apikeys: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if err := keepAccess(tmp, path); err != nil {
		tmp.Close()
		return "", err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return "", fmt.Errorf("apikeys: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("apikeys: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("apikeys: %w", err)
	}
	return secret, nil
}

// keepAccess gives tmp the mode and owner of the file at path, if there is
// one, so that the API servers that read it still can once tmp replaces it
// (a file replaced by root must not become root's alone).
func keepAccess(tmp *os.File, path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // a new file: 0600, its maker's
	}
	if err != nil {
		return fmt.Errorf("apikeys: %w", err)
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		return fmt.Errorf("apikeys: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
		if err := tmp.Chown(int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("apikeys: %w", err)
		}
	}
	return nil
}
