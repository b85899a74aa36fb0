package main

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Where the config file is, and the variables that name it.
const (
	// configEnv names the config file when --config is not given.
	configEnv = "TETHER_CONFIG"
	// xdgConfigEnv is the XDG base directory of users' configuration; the
	// default config file is $XDG_CONFIG_HOME/tether/config.yaml, else
	// ~/.config/tether/config.yaml.
	xdgConfigEnv = "XDG_CONFIG_HOME"
)

// Modes of what tetherctl writes: the config file may hold a token.
const (
	configFileMode fs.FileMode = 0o600
	configDirMode  fs.FileMode = 0o700
)

// config is tetherctl's config file: named contexts, each an API to call
// and how, and the one used when --context is not given. It is YAML, read
// strictly (an unknown field is an error):
//
//	current-context: prod
//	contexts:
//	- name: prod
//	  server: api-1.example:7070,api-2.example:7070
//	  ca: /etc/tether/ca.pem
//	  tokenFile: ~/.config/tether/prod.token
//	- name: dev
//	  server: 127.0.0.1:7070
type config struct {
	// CurrentContext names the context used when --context is not given;
	// "" for none.
	CurrentContext string `json:"current-context,omitempty"`
	// Contexts are the named contexts, in the file's order.
	Contexts []namedContext `json:"contexts,omitempty"`
}

// namedContext is one API and how to call it. Paths (ca, tokenFile) are
// relative to the config file's directory, or start with ~/ for the home
// directory.
type namedContext struct {
	// Name is what --context and use-context select it by.
	Name string `json:"name"`
	// Server is the API's gRPC endpoint, or several replicas'
	// comma-separated, as --server.
	Server string `json:"server,omitempty"`
	// CA is a PEM file of the authorities to trust: it implies TLS.
	CA string `json:"ca,omitempty"`
	// TLS connects over TLS, trusting the system's authorities unless CA
	// is set.
	TLS bool `json:"tls,omitempty"`
	// Cert and Key are a client certificate and its private key (PEM
	// files; mutual TLS): the API authenticates the caller by the
	// certificate when its keys file names it. Both or neither.
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
	// TokenFile is a file that holds the API key (surrounding whitespace
	// is ignored): the preferred way to give one.
	TokenFile string `json:"tokenFile,omitempty"`
	// Token is the API key itself. A file that holds one must be readable
	// by its owner only.
	Token string `json:"token,omitempty"`
}

// configFile is a config file as read: where it is, whether it exists,
// and its content (empty when it does not exist).
type configFile struct {
	path   string
	exists bool
	config
}

// defaultConfigPath is $XDG_CONFIG_HOME/tether/config.yaml, or
// ~/.config/tether/config.yaml when XDG_CONFIG_HOME is unset (or not an
// absolute path, which the XDG specification says to ignore).
func defaultConfigPath() (string, error) {
	dir := os.Getenv(xdgConfigEnv)
	if !filepath.IsAbs(dir) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find the config file: %w (give --config or $%s)", err, configEnv)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "tether", "config.yaml"), nil
}

// readConfig reads the config file at path. A file that does not exist
// is an empty config. It refuses a file that does not decode strictly,
// whose contexts are not well formed, or that holds an inline token and
// is open to group or others.
func readConfig(path string) (*configFile, error) {
	cf := &configFile{path: path}
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cf, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	cf.exists = true
	if err := decodeConfig(raw, &cf.config); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if err := cf.validate(); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if err := checkInlineTokenMode(path, &cf.config); err != nil {
		return nil, err
	}
	return cf, nil
}

// decodeConfig decodes a config file strictly: a field that config does
// not have, spelled exactly (encoding/json would take "tokenfile" for
// tokenFile), a field given twice, or a value of the wrong type is an
// error that names it.
func decodeConfig(raw []byte, c *config) error {
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return yamlError(err)
	}
	if err := checkConfigFields(doc, reflect.TypeFor[config](), ""); err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(raw, c); err != nil {
		return yamlError(err)
	}
	return nil
}

// checkConfigFields fails for the first key of the decoded YAML doc that is not
// the JSON name of a field of the struct type t, where it is (path).
func checkConfigFields(doc any, t reflect.Type, path string) error {
	switch t.Kind() {
	case reflect.Struct:
		m, ok := doc.(map[string]any)
		if !ok {
			return nil // UnmarshalStrict reports the type
		}
		fields := map[string]reflect.Type{}
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields[name] = f.Type
		}
		keys := slices.Sorted(maps.Keys(m))
		for _, k := range keys {
			ft, ok := fields[k]
			if !ok {
				return fmt.Errorf("unknown field %q%s", fieldPath(path, k), caseTypo(k, fields))
			}
			if err := checkConfigFields(m[k], ft, fieldPath(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		items, ok := doc.([]any)
		if !ok {
			return nil
		}
		for i, item := range items {
			if err := checkConfigFields(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// fieldPath appends key to a field path: "contexts[0]" + "tokenfile".
func fieldPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// caseTypo names the field that key misspells by case, if one does.
func caseTypo(key string, fields map[string]reflect.Type) string {
	for name := range fields {
		if strings.EqualFold(name, key) {
			return fmt.Sprintf(" (did you mean %q?)", name)
		}
	}
	return ""
}

// yamlError drops the decoder's layers from a decoding error: "error
// unmarshaling JSON: while decoding JSON: json: unknown field "x"" is
// reported as "unknown field "x"".
func yamlError(err error) error {
	msg := err.Error()
	for _, prefix := range []string{"error unmarshaling JSON: ", "while decoding JSON: ", "json: ", "error converting YAML to JSON: ", "yaml: "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	return errors.New(msg)
}

// validate checks what decoding cannot: every context has a name, names
// are unique, and a context gives its token one way only.
func (c *config) validate() error {
	seen := map[string]bool{}
	for i, ctx := range c.Contexts {
		if ctx.Name == "" {
			return fmt.Errorf("contexts[%d] has no name", i)
		}
		if seen[ctx.Name] {
			return fmt.Errorf("two contexts are named %q", ctx.Name)
		}
		seen[ctx.Name] = true
		if ctx.Token != "" && ctx.TokenFile != "" {
			return fmt.Errorf("context %q has both token and tokenFile: keep one (tokenFile is preferred)", ctx.Name)
		}
	}
	return nil
}

// checkInlineTokenMode refuses a config file that holds an inline token
// and that group or others may read or write: the token would be theirs.
func checkInlineTokenMode(path string, c *config) error {
	if runtime.GOOS == "windows" { // no Unix modes
		return nil
	}
	i := slices.IndexFunc(c.Contexts, func(ctx namedContext) bool { return ctx.Token != "" })
	if i < 0 {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("config file %s holds an inline token (context %q) but its mode %04o lets group or others read it: "+
			"run chmod 600 %s, or move the token to a file named by tokenFile", path, c.Contexts[i].Name, perm, path)
	}
	return nil
}

// context returns the context named name, or nil.
func (c *config) context(name string) *namedContext {
	for i := range c.Contexts {
		if c.Contexts[i].Name == name {
			return &c.Contexts[i]
		}
	}
	return nil
}

// names lists the contexts' names, for messages.
func (c *config) names() string {
	if len(c.Contexts) == 0 {
		return "it has none"
	}
	names := make([]string, len(c.Contexts))
	for i, ctx := range c.Contexts {
		names[i] = ctx.Name
	}
	return "it has " + strings.Join(names, ", ")
}

// find returns the context named name, or an error that says which
// contexts there are.
func (cf *configFile) find(name string) (*namedContext, error) {
	if ctx := cf.context(name); ctx != nil {
		return ctx, nil
	}
	if !cf.exists {
		return nil, fmt.Errorf("no context %q: the config file %s does not exist (tetherctl config set-context %s --server HOST:PORT)", name, cf.path, name)
	}
	return nil, fmt.Errorf("no context %q in %s: %s (tetherctl config get-contexts)", name, cf.path, cf.names())
}

// resolvePath makes a path of the config file absolute: ~/ is the home
// directory, and a relative path is relative to the file's directory.
func (cf *configFile) resolvePath(p string) (string, error) {
	if p == "" || filepath.IsAbs(p) {
		return p, nil
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("expand %s: %w", p, err)
		}
		return filepath.Join(home, rest), nil
	}
	return filepath.Join(filepath.Dir(cf.path), p), nil
}

// token returns the context's API key, inline or read from its tokenFile,
// and where it came from (for messages: never the key), or "" when it
// has none.
func (cf *configFile) token(ctx *namedContext) (key, from string, err error) {
	if ctx.Token != "" {
		return ctx.Token, fmt.Sprintf("the inline token of context %q (%s)", ctx.Name, cf.path), nil
	}
	if ctx.TokenFile == "" {
		return "", "", nil
	}
	path, err := cf.resolvePath(ctx.TokenFile)
	if err != nil {
		return "", "", fmt.Errorf("context %q: %w", ctx.Name, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", fmt.Errorf("context %q: read its tokenFile: %w", ctx.Name, err)
	}
	key = strings.TrimSpace(string(b))
	if key == "" {
		return "", "", fmt.Errorf("context %q: its tokenFile %s is empty", ctx.Name, path)
	}
	return key, fmt.Sprintf("the tokenFile %s of context %q", path, ctx.Name), nil
}

// write replaces the config file whole: it writes a temporary file beside
// it (mode 0600) and renames it over the file, so a reader sees the old
// file or the new one, never half of one. It creates the file's
// directory (mode 0700) if needed. A symbolic link is followed: its
// target is replaced and the link kept.
func (cf *configFile) write() error {
	if err := cf.validate(); err != nil {
		return err
	}
	raw, err := yaml.Marshal(&cf.config)
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	path := cf.path
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, configDirMode); err != nil {
		return fmt.Errorf("create the config file's directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write config file: %w", err)
	}
	done := false
	defer func() {
		if !done { // Close again is harmless; the file must go
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(configFileMode); err != nil {
		return fmt.Errorf("write config file: %w", err)
	}
	if _, err := tmp.Write(raw); err != nil {
		return fmt.Errorf("write config file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write config file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write config file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write config file: %w", err)
	}
	done = true
	cf.exists = true
	syncDir(dir)
	return nil
}

// syncDir flushes a directory, so a rename in it survives a crash; where
// directories cannot be synced it does nothing.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}
