package main

import (
	"context"
	"time"

	"google.golang.org/grpc"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/sdk/go/apiclient"
)

// pageSize is what list commands ask for per page; they follow the page
// tokens to the end.
const pageSize = 500

// client is a connection to the API replicas with its service stubs.
type client struct {
	addr        string
	timeout     time.Duration
	conn        *grpc.ClientConn
	fleets      tetherv1.FleetServiceClient
	gameServers tetherv1.GameServerServiceClient
	hosts       tetherv1.HostServiceClient
	allocation  tetherv1.AllocationServiceClient
	sessions    tetherv1.GameSessionServiceClient
}

// dial prepares a connection to the replicas addr lists (comma-separated);
// it connects on the first call, spreads calls over the replicas and
// retries a call a replica could not take on another (apiclient). Each
// call is bounded by timeout, its retries included, and carries key (an
// API key) when it is set. With tls (or a caFile, the authorities to
// trust instead of the system's) it connects over TLS.
func dial(cn connection, timeout time.Duration) (*client, error) {
	addr := cn.server
	var opts []grpc.DialOption
	if cn.token != "" {
		opts = append(opts, apiclient.WithKey(cn.token))
	}
	if cn.tls || cn.ca != "" || cn.cert != "" {
		o, err := apiclient.WithTLS(cn.ca, cn.cert, cn.key)
		if err != nil {
			return nil, err
		}
		opts = append(opts, o)
	}
	conn, err := apiclient.Dial(apiclient.Split(addr), opts...)
	if err != nil {
		return nil, err
	}
	return &client{
		addr:        addr,
		timeout:     timeout,
		conn:        conn,
		fleets:      tetherv1.NewFleetServiceClient(conn),
		gameServers: tetherv1.NewGameServerServiceClient(conn),
		hosts:       tetherv1.NewHostServiceClient(conn),
		allocation:  tetherv1.NewAllocationServiceClient(conn),
		sessions:    tetherv1.NewGameSessionServiceClient(conn),
	}, nil
}

// Close closes the connection.
func (c *client) Close() error { return c.conn.Close() }

// call bounds one request by the timeout.
func (c *client) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// newRequestID returns a fresh idempotency key for a mutating call, so the
// events it writes carry it as their request and correlation id.
func newRequestID() string { return apiclient.NewRequestID("tetherctl-") }

// listAll follows page tokens: page fetches one page from a token and
// returns its items and the next token.
func listAll[T any](ctx context.Context, c *client, page func(ctx context.Context, token string) ([]T, string, error)) ([]T, error) {
	var all []T
	token := ""
	for {
		cctx, cancel := c.call(ctx)
		items, next, err := page(cctx, token)
		cancel()
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == "" || next == token {
			return all, nil
		}
		token = next
	}
}
