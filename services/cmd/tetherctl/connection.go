package main

import (
	"fmt"
	"os"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// connection is where and how a command calls the API, settled from the
// flags, the environment, the config file's context and `tether dev`.
type connection struct {
	// server lists the API endpoints, comma-separated.
	server string
	// ca is the PEM file of the authorities to trust ("": the system's).
	ca string
	// tls connects over TLS; a ca or a cert implies it.
	tls bool
	// cert and key are a client certificate and its key (mutual TLS).
	cert, key string
	// token is the API key, "" for none.
	token string
	// tokenFrom says where token came from, for messages (never the key).
	tokenFrom string
}

// connection settles where and how to call the API. Each setting comes
// from the first of: its flag, its environment variable, the selected
// context (--context, else the config file's current-context), and for
// the key, on loopback, `tether dev`'s admin key; the server is then a
// running `tether dev`'s (devServer), else defaultServer.
func (a *app) connection() (connection, error) {
	ctx, cf, err := a.selectedContext()
	if err != nil {
		return connection{}, err
	}
	if ctx == nil {
		ctx = &namedContext{}
	}
	var cn connection

	switch {
	case a.given("server") && a.given("addr") && a.server != a.addr:
		return connection{}, fmt.Errorf("--server %q and --addr %q differ: --addr is the older name of --server, give one", a.server, a.addr)
	case a.given("server"):
		cn.server = a.server
	case a.given("addr"):
		cn.server = a.addr
	case os.Getenv(serverEnv) != "":
		cn.server = os.Getenv(serverEnv)
	case os.Getenv(addrEnv) != "":
		cn.server = os.Getenv(addrEnv)
	case ctx.Server != "":
		cn.server = ctx.Server
	default:
		cn.server = defaultServer
		// `tether dev` on this machine, wherever it listens.
		if addr := devServer(); addr != "" {
			cn.server = addr
		}
	}

	switch {
	case a.given("ca"): // even "": no CA, whatever the environment or context say
		cn.ca = a.ca
	case os.Getenv(caEnv) != "":
		cn.ca = os.Getenv(caEnv)
	case ctx.CA != "":
		if cn.ca, err = cf.resolvePath(ctx.CA); err != nil {
			return connection{}, fmt.Errorf("context %q: %w", ctx.Name, err)
		}
	}

	if a.given("tls") {
		cn.tls = a.tls
	} else {
		cn.tls = ctx.TLS
	}

	for _, f := range []struct {
		flag, env, ctx string
		dst            *string
		val            string
	}{{"cert", certEnv, ctx.Cert, &cn.cert, a.cert}, {"key", keyEnv, ctx.Key, &cn.key, a.certKey}} {
		switch {
		case a.given(f.flag):
			*f.dst = f.val
		case os.Getenv(f.env) != "":
			*f.dst = os.Getenv(f.env)
		case f.ctx != "":
			if *f.dst, err = cf.resolvePath(f.ctx); err != nil {
				return connection{}, fmt.Errorf("context %q: %w", ctx.Name, err)
			}
		}
	}
	if (cn.cert == "") != (cn.key == "") {
		return connection{}, fmt.Errorf("a client certificate needs both --cert and --key (or %s and %s, or the context's cert and key)", certEnv, keyEnv)
	}

	switch {
	case a.key != "": // an empty --token is no token given, as before contexts
		cn.token, cn.tokenFrom = a.key, "--token"
	case os.Getenv(tokenEnv) != "":
		cn.token, cn.tokenFrom = os.Getenv(tokenEnv), "$"+tokenEnv
	default:
		if cn.token, cn.tokenFrom, err = cf.token(ctx); err != nil {
			return connection{}, err
		}
		if cn.token != "" && ctx.Server != "" && cn.server != ctx.Server {
			// The context's key is for its own server: never sent elsewhere.
			return connection{}, fmt.Errorf("context %q holds a key for %s, not for %s: give that server's key (--token or %s), or use its context",
				ctx.Name, ctx.Server, cn.server, tokenEnv)
		}
		if cn.token == "" {
			if cn.token = devAdminKey(cn.server); cn.token != "" {
				cn.tokenFrom = "the admin key of tether dev on this machine"
			}
		}
	}
	return cn, nil
}

// given reports whether the global flag name was on the command line.
func (a *app) given(name string) bool {
	f := a.flags.Lookup(name)
	return f != nil && f.Changed
}

// selectedContext reads the config file and returns the context --context
// names, else the file's current context, else nil. A context named but
// missing is an error.
func (a *app) selectedContext() (*namedContext, *configFile, error) {
	cf, err := a.readConfig()
	if err != nil {
		return nil, nil, err
	}
	switch {
	case a.contextName != "":
		ctx, err := cf.find(a.contextName)
		return ctx, cf, err
	case cf.CurrentContext != "":
		ctx := cf.context(cf.CurrentContext)
		if ctx == nil {
			return nil, nil, fmt.Errorf("the current-context %q of %s is not one of its contexts (%s): tetherctl config use-context NAME, or --context NAME",
				cf.CurrentContext, cf.path, cf.names())
		}
		return ctx, cf, nil
	}
	return nil, cf, nil
}

// configFilePath is the config file: --config, else $TETHER_CONFIG, else
// the default.
func (a *app) configFilePath() (string, error) {
	if a.configPath != "" {
		return a.configPath, nil
	}
	if p := os.Getenv(configEnv); p != "" {
		return p, nil
	}
	return defaultConfigPath()
}

// readConfig reads the config file configFilePath names.
func (a *app) readConfig() (*configFile, error) {
	path, err := a.configFilePath()
	if err != nil {
		return nil, err
	}
	return readConfig(path)
}

// explain adds to an UNAUTHENTICATED error where the key came from, so
// the operator knows which one to fix; other errors pass as they are.
func (cn connection) explain(err error) error {
	if err == nil || status.Code(err) != codes.Unauthenticated {
		return err
	}
	from := cn.tokenFrom
	if from == "" {
		from = "nowhere: give --token, $" + tokenEnv + ", or a context's tokenFile"
	}
	return fmt.Errorf("%w\n  the API key came from %s", err, from)
}
