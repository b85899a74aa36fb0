package natsauth

import (
	"bytes"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// A credentials directory, made by Init (`tether nats-auth init`), holds:
//
//	keys/operator.nk, keys/system.nk, keys/account.nk   the signing seeds (0600): keep them offline in production
//	creds/admin.creds, creds/apiserver.creds, …,
//	creds/hosts/ID.creds                                one user per principal (0600): give each to its component only
//	server.conf                                         for nats-server: `include` it (operator, accounts, resolver)
//	signers                                             every principal's public keys, for readers that verify events
//	revoked                                             revoked user keys, with when
//
// Every file is written beside its final name and renamed over it, so a
// watcher never sees half a file.
const (
	keysDir     = "keys"
	credsDir    = "creds"
	ServerConf  = "server.conf"
	SignersFile = "signers"
	revokedFile = "revoked"
)

// AccountName is the NATS account of every Tether principal.
const AccountName = "TETHER"

// CredsPath returns the credentials file of principal in dir.
func CredsPath(dir, principal string) string {
	return filepath.Join(dir, credsDir, filepath.FromSlash(principal)+".creds")
}

// Init creates the credentials directory dir, or completes it: the
// operator, system account and Tether account keys if missing, a user for
// every component and for each of hosts that has none, then server.conf
// and signers. Existing keys and credentials are kept; credentials whose
// permissions an earlier version wrote are rewritten with this version's,
// with the same key (a new version's subjects, e.g. the hosts' logs
// subjects, work once each component has re-read its file).
func Init(dir string, hosts []string) error {
	principals := Components()
	for _, h := range hosts {
		p := HostPrincipal(h)
		if _, ok := HostID(p); !ok {
			return fmt.Errorf("natsauth: host id %q is not valid", h)
		}
		principals = append(principals, p)
	}
	if err := os.MkdirAll(filepath.Join(dir, keysDir), 0o700); err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	k, err := loadKeys(dir, true)
	if err != nil {
		return err
	}
	// Hosts made earlier (add-host) are brought up to date too.
	earlier, err := filepath.Glob(filepath.Join(dir, credsDir, "hosts", "*.creds"))
	if err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	for _, path := range earlier {
		p := HostPrincipal(strings.TrimSuffix(filepath.Base(path), ".creds"))
		if _, ok := HostID(p); ok && !slices.Contains(principals, p) {
			principals = append(principals, p)
		}
	}
	for _, p := range principals {
		if _, err := os.Stat(CredsPath(dir, p)); err == nil {
			if _, err := k.refresh(dir, p); err != nil {
				return err
			}
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("natsauth: %w", err)
		}
		if err := k.issue(dir, p); err != nil {
			return err
		}
	}
	return k.writeServerConf(dir)
}

// AddHost gives host id a user of its own (Init for one host).
func AddHost(dir, id string) error { return Init(dir, []string{id}) }

// Rotate replaces principal's user with a new key. The old credentials
// keep working until they are revoked (Revoke) or expire, so a component
// that watches its credentials file moves to the new ones without a
// restart first; the old public key stays in signers, so the events it
// signed stay verified. It returns the old public key.
func Rotate(dir, principal string) (string, error) {
	if err := CheckPrincipal(principal); err != nil {
		return "", err
	}
	old, err := ReadCreds(CredsPath(dir, principal))
	if err != nil {
		return "", err
	}
	k, err := loadKeys(dir, false)
	if err != nil {
		return "", err
	}
	return old.PublicKey, k.issue(dir, principal)
}

// Revoke revokes a user's public key: server.conf is rewritten with an
// account that refuses it, and nats-server refuses it once it reloads its
// configuration (SIGHUP, `nats-server --signal reload`; the embedded
// server: natsembed.Server.ReloadAuth), closing its connections. Its key
// stays in signers: the events it signed before stay verified.
func Revoke(dir, publicKey string) error {
	if !nkeys.IsValidPublicUserKey(publicKey) {
		return fmt.Errorf("natsauth: %q is no user public key", publicKey)
	}
	k, err := loadKeys(dir, false)
	if err != nil {
		return err
	}
	revoked, err := readRevoked(dir)
	if err != nil {
		return err
	}
	if _, ok := revoked[publicKey]; !ok {
		revoked[publicKey] = time.Now().Unix()
	}
	var b bytes.Buffer
	b.WriteString("# Revoked NATS user keys of this Tether deployment, with the Unix time of revocation.\n")
	keys := make([]string, 0, len(revoked))
	for pub := range revoked {
		keys = append(keys, pub)
	}
	sort.Strings(keys)
	for _, pub := range keys {
		fmt.Fprintf(&b, "%s %d\n", pub, revoked[pub])
	}
	if err := writeFile(filepath.Join(dir, revokedFile), b.Bytes(), 0o644); err != nil {
		return err
	}
	return k.writeServerConf(dir)
}

// signingKeys are the operator's and the accounts' seeds.
type signingKeys struct {
	operator, system, account nkeys.KeyPair
}

// loadKeys reads the signing keys of dir, creating missing ones when
// create is set.
func loadKeys(dir string, create bool) (*signingKeys, error) {
	load := func(name string, make func() (nkeys.KeyPair, error)) (nkeys.KeyPair, error) {
		path := filepath.Join(dir, keysDir, name+".nk")
		seed, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) && create {
			kp, err := make()
			if err != nil {
				return nil, fmt.Errorf("natsauth: create %s key: %w", name, err)
			}
			if seed, err = kp.Seed(); err != nil {
				return nil, fmt.Errorf("natsauth: %w", err)
			}
			return kp, writeFile(path, append(seed, '\n'), 0o600)
		}
		if err != nil {
			return nil, fmt.Errorf("natsauth: %w (run `tether nats-auth init` first)", err)
		}
		kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
		if err != nil {
			return nil, fmt.Errorf("natsauth: %s: %w", path, err)
		}
		return kp, nil
	}
	var k signingKeys
	var err error
	if k.operator, err = load("operator", nkeys.CreateOperator); err != nil {
		return nil, err
	}
	if k.system, err = load("system", nkeys.CreateAccount); err != nil {
		return nil, err
	}
	if k.account, err = load("account", nkeys.CreateAccount); err != nil {
		return nil, err
	}
	return &k, nil
}

// issue creates a new user key for principal, writes its credentials and
// adds its public key to signers.
func (k *signingKeys) issue(dir, principal string) error {
	user, err := nkeys.CreateUser()
	if err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	pub, err := user.PublicKey()
	if err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	uc, err := userClaims(principal, pub)
	if err != nil {
		return err
	}
	path := CredsPath(dir, principal)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	// Signers first: an event signed with the new key must never meet a
	// reader that does not know it.
	if err := addSigner(dir, principal, pub); err != nil {
		return err
	}
	return k.writeCreds(path, uc, user)
}

// userClaims are the JWT claims of principal's user pub: its name and
// its permissions (PermissionsOf).
func userClaims(principal, pub string) (*jwt.UserClaims, error) {
	perms, err := PermissionsOf(principal)
	if err != nil {
		return nil, err
	}
	uc := jwt.NewUserClaims(pub)
	uc.Name = principal
	uc.Pub.Allow.Add(perms.Publish...)
	uc.Pub.Deny.Add(perms.PublishDeny...)
	uc.Sub.Allow.Add(perms.Subscribe...)
	if perms.RespondWithin > 0 {
		uc.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: perms.RespondWithin}
	}
	return uc, nil
}

// writeCreds signs uc with the account and writes it with user's seed to
// path.
func (k *signingKeys) writeCreds(path string, uc *jwt.UserClaims, user nkeys.KeyPair) error {
	seed, err := user.Seed()
	if err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	token, err := uc.Encode(k.account)
	if err != nil {
		return fmt.Errorf("natsauth: user %s: %w", uc.Name, err)
	}
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return fmt.Errorf("natsauth: user %s: %w", uc.Name, err)
	}
	return writeFile(path, creds, 0o600)
}

// refresh brings the permissions of principal's existing credentials up
// to this version's (PermissionsOf), keeping its key: the file is
// rewritten only when they differ, and a component that watches it
// (Credentials.Watch) reconnects with them. It reports whether it did.
func (k *signingKeys) refresh(dir, principal string) (bool, error) {
	path := CredsPath(dir, principal)
	cur, err := ReadCreds(path)
	if err != nil {
		return false, err
	}
	have, err := jwt.DecodeUserClaims(cur.JWT)
	if err != nil {
		return false, fmt.Errorf("natsauth: %s: %w", path, err)
	}
	want, err := userClaims(principal, cur.PublicKey)
	if err != nil {
		return false, err
	}
	if samePermissions(have.Permissions, want.Permissions) {
		return false, nil
	}
	return true, k.writeCreds(path, want, cur.Key)
}

// samePermissions reports whether two users' permissions allow and deny
// the same subjects and answers alike.
func samePermissions(a, b jwt.Permissions) bool {
	same := func(x, y jwt.StringList) bool {
		return slices.Equal(slices.Sorted(slices.Values(x)), slices.Sorted(slices.Values(y)))
	}
	resp := func(r *jwt.ResponsePermission) jwt.ResponsePermission {
		if r == nil {
			return jwt.ResponsePermission{}
		}
		return *r
	}
	return same(a.Pub.Allow, b.Pub.Allow) && same(a.Pub.Deny, b.Pub.Deny) &&
		same(a.Sub.Allow, b.Sub.Allow) && same(a.Sub.Deny, b.Sub.Deny) && resp(a.Resp) == resp(b.Resp)
}

// writeServerConf writes server.conf: the operator, the system account and
// Tether's account (JetStream without limits, the revocations), preloaded
// into a memory resolver.
func (k *signingKeys) writeServerConf(dir string) error {
	opPub, err := k.operator.PublicKey()
	if err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	sysPub, err := k.system.PublicKey()
	if err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	accPub, err := k.account.PublicKey()
	if err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	// The operator's and the system account's JWTs are made once: nats-server
	// cannot reload a changed operator, and a JWT encoded again is changed
	// (its id and time).
	opJWT, err := k.stableJWT(dir, "operator", func() (string, error) {
		oc := jwt.NewOperatorClaims(opPub)
		oc.Name = "tether"
		oc.SystemAccount = sysPub
		return oc.Encode(k.operator)
	})
	if err != nil {
		return err
	}
	sysJWT, err := k.stableJWT(dir, "system", func() (string, error) {
		sc := jwt.NewAccountClaims(sysPub)
		sc.Name = "SYS"
		return sc.Encode(k.operator)
	})
	if err != nil {
		return err
	}
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = AccountName
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	revoked, err := readRevoked(dir)
	if err != nil {
		return err
	}
	for pub, at := range revoked {
		ac.RevokeAt(pub, time.Unix(at, 0))
	}
	accJWT, err := ac.Encode(k.operator)
	if err != nil {
		return fmt.Errorf("natsauth: account: %w", err)
	}
	var b bytes.Buffer
	b.WriteString("# Generated by `tether nats-auth`: Tether's NATS operator and accounts.\n")
	b.WriteString("# Include it from nats-server.conf; reload nats-server after a revocation.\n")
	fmt.Fprintf(&b, "operator: %s\n", strconv.Quote(opJWT))
	fmt.Fprintf(&b, "system_account: %s\n", strconv.Quote(sysPub))
	b.WriteString("resolver: MEMORY\n")
	b.WriteString("resolver_preload: {\n")
	fmt.Fprintf(&b, "  %s: %s\n", sysPub, strconv.Quote(sysJWT))
	fmt.Fprintf(&b, "  %s: %s\n", accPub, strconv.Quote(accJWT))
	b.WriteString("}\n")
	return writeFile(filepath.Join(dir, ServerConf), b.Bytes(), 0o644)
}

// stableJWT returns the JWT kept in keys/<name>.jwt, making it with encode
// the first time.
func (k *signingKeys) stableJWT(dir, name string, encode func() (string, error)) (string, error) {
	path := filepath.Join(dir, keysDir, name+".jwt")
	b, err := os.ReadFile(path)
	if err == nil {
		return string(bytes.TrimSpace(b)), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("natsauth: %w", err)
	}
	token, err := encode()
	if err != nil {
		return "", fmt.Errorf("natsauth: %s JWT: %w", name, err)
	}
	return token, writeFile(path, []byte(token+"\n"), 0o600)
}

// readRevoked reads the revoked file: public key → Unix time.
func readRevoked(dir string) (map[string]int64, error) {
	out := map[string]int64{}
	data, err := os.ReadFile(filepath.Join(dir, revokedFile))
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("natsauth: %w", err)
	}
	for n, f := range fieldLines(data) {
		if len(f) != 2 || !nkeys.IsValidPublicUserKey(f[0]) {
			return nil, fmt.Errorf("natsauth: %s line %d: want \"PUBLIC_KEY UNIX_TIME\"", revokedFile, n)
		}
		at, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("natsauth: %s line %d: %w", revokedFile, n, err)
		}
		out[f[0]] = at
	}
	return out, nil
}

// addSigner adds principal's public key to the signers file.
func addSigner(dir, principal, pub string) error {
	path := filepath.Join(dir, SignersFile)
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("natsauth: %w", err)
	}
	if len(data) == 0 {
		data = []byte(signersHeader)
	}
	line := principal + " " + pub + "\n"
	if slices.Contains(strings.SplitAfter(string(data), "\n"), line) {
		return nil
	}
	return writeFile(path, append(data, line...), 0o644)
}

const signersHeader = `# Tether event signers: "PRINCIPAL PUBLIC_KEY" per line, every key a
# principal ever had (rotated keys stay, so the events they signed stay
# verified). Readers with --nats-signers reload this file when it changes.
# "verify-from SEQUENCE" exempts the events written before signing began.
`

// writeFile writes data beside path and renames it over path.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("natsauth: %w", err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("natsauth: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	return nil
}

// fieldLines yields the fields of each line of a text file with its line
// number, leaving out blank lines and '#' comments.
func fieldLines(data []byte) iter.Seq2[int, []string] {
	return func(yield func(int, []string) bool) {
		n := 0
		for line := range strings.Lines(string(data)) {
			n++
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if !yield(n, strings.Fields(line)) {
				return
			}
		}
	}
}
