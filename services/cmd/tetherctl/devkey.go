package main

import (
	"net"
	"os"
	"strings"

	"github.com/tetherhq/tether/sdk/go/apiclient"
	"github.com/tetherhq/tether/services/dev/devkeys"
)

// devAdminKey is the admin key of a `tether dev` stack on this machine
// (its default data dir), when every endpoint of addr is on loopback;
// otherwise, or without one, "". The key is sent to loopback addresses
// only: a remote API needs --token.
func devAdminKey(addr string) string {
	endpoints := apiclient.Split(addr)
	if len(endpoints) == 0 {
		return ""
	}
	for _, e := range endpoints {
		if !loopback(e) {
			return ""
		}
	}
	dir, err := devkeys.DefaultDataDir()
	if err != nil {
		return ""
	}
	b, err := os.ReadFile(devkeys.File(dir, "admin"))
	if err != nil {
		return "" // no dev stack here: the API answers what it needs
	}
	return strings.TrimSpace(string(b))
}

// devServer is the gRPC address of a `tether dev` stack running on this
// machine with its default data dir, as it wrote it there (it may have
// moved off 7070, taken), when that address is on loopback; otherwise "".
func devServer() string {
	dir, err := devkeys.DefaultDataDir()
	if err != nil {
		return ""
	}
	a, err := devkeys.ReadAddresses(dir)
	if err != nil || !loopback(a.GRPC) {
		return "" // none runs: the default address, and its error if nothing answers
	}
	return a.GRPC
}

// loopback reports whether a host:port endpoint is a loopback address
// (an IP: a name such as localhost is resolved by others, and could
// resolve elsewhere).
func loopback(endpoint string) bool {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
